//! MIG geometry: the GPU-instance profiles each GPU model offers, where on
//! the GPU each may start, and which sets of instances fit on one GPU.
//!
//! A MIG-capable GPU has memory slices (8, or 4 on A30) and compute slices
//! (7, or 4 on A30). A GPU instance takes a run of memory slices starting at
//! one of its profile's allowed positions; instances may not overlap, their
//! compute slices may not add up to more than the GPU has, and at most one
//! instance may take the media extensions (`+me`). These tables are
//! `nvidia-smi mig -lgipp` (placements) and `-lgip` (profiles) as NVIDIA's
//! MIG User Guide, "Supported MIG Profiles", lists them for each model; the
//! A100-40GB and H100-80GB rows are checked against the recordings in
//! `data/nvidia-smi` (`tests/mig_geometry.rs`).
//!
//! The planner (`mig_planner.rs`) chooses layouts from these; nothing here
//! knows about jobs.

use crate::model::resources::MigProfile;

/// One GPU-instance profile of a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Its name, as `nvidia-smi` prints it (`1g.10gb`, `1g.10gb+me`).
    pub name: &'static str,
    /// `nvidia-smi mig -cgi` takes this id.
    pub id: u8,
    pub compute: u8,
    /// Memory slices taken.
    pub slices: u8,
    /// Memory slices it may start at.
    pub starts: &'static [u8],
}

/// A MIG-capable GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// gpool's short model name (`H100-80GB`).
    pub model: &'static str,
    pub memory_slices: u8,
    pub compute_slices: u8,
    pub shapes: &'static [Shape],
}

const fn shape(name: &'static str, id: u8, compute: u8, slices: u8, starts: &'static [u8]) -> Shape {
    Shape { name, id, compute, slices, starts }
}

/// The shapes of a GPU with 8 memory and 7 compute slices (A100, H100,
/// H200), by the memory sizes of its 1g, 1g-double, 2g, 3g, 4g and 7g profiles.
macro_rules! seven_slice {
    ($model:literal, $one:literal, $one_me:literal, $one_big:literal, $two:literal, $three:literal, $four:literal, $seven:literal) => {
        Geometry {
            model: $model,
            memory_slices: 8,
            compute_slices: 7,
            shapes: &[
                shape($one, 19, 1, 1, &[0, 1, 2, 3, 4, 5, 6]),
                shape($one_me, 20, 1, 1, &[0, 1, 2, 3, 4, 5, 6]),
                shape($one_big, 15, 1, 2, &[0, 2, 4, 6]),
                shape($two, 14, 2, 2, &[0, 2, 4]),
                shape($three, 9, 3, 4, &[0, 4]),
                shape($four, 5, 4, 4, &[0]),
                shape($seven, 0, 7, 8, &[0]),
            ],
        }
    };
}

/// Every model gpool manages MIG layouts of.
pub static GEOMETRIES: &[Geometry] = &[
    seven_slice!("A100-40GB", "1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    seven_slice!("A100-80GB", "1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    seven_slice!("H100-80GB", "1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    seven_slice!("H100-94GB", "1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"),
    seven_slice!("H200-141GB", "1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    Geometry {
        model: "A30-24GB",
        memory_slices: 4,
        compute_slices: 4,
        shapes: &[
            shape("1g.6gb", 14, 1, 1, &[0, 1, 2, 3]),
            shape("1g.6gb+me", 21, 1, 1, &[0, 1, 2, 3]),
            shape("2g.12gb", 5, 2, 2, &[0, 2]),
            shape("2g.12gb+me", 6, 2, 2, &[0, 2]),
            shape("4g.24gb", 0, 4, 4, &[0]),
        ],
    },
];

/// The geometry of a model (case-insensitive), if gpool knows it.
pub fn geometry(model: &str) -> Option<&'static Geometry> {
    GEOMETRIES.iter().find(|g| g.model.eq_ignore_ascii_case(model))
}

/// One GPU instance of a layout: a shape (index into [`Geometry::shapes`])
/// at a start slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instance {
    pub shape: u8,
    pub start: u8,
}

/// Why a layout is not valid for its GPU.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("{model} has no MIG profile {profile} (it has {known})")]
    UnknownProfile { model: &'static str, profile: String, known: String },
    #[error("{profile} cannot start at memory slice {start} (it starts at {allowed:?})")]
    BadStart { profile: &'static str, start: u8, allowed: &'static [u8] },
    #[error("{a} and {b} overlap")]
    Overlap { a: &'static str, b: &'static str },
    #[error("the layout takes {used} compute slices of {total}")]
    TooMuchCompute { used: u32, total: u8 },
    #[error("at most one instance may take the media extensions (+me)")]
    TwoMediaExtensions,
}

impl Geometry {
    /// The shape of a profile, by index.
    pub fn shape_of(&self, p: &MigProfile) -> Option<u8> {
        let name = p.to_string();
        self.shapes.iter().position(|s| s.name == name).map(|i| i as u8)
    }

    /// The profile of a shape.
    pub fn profile(&self, shape: u8) -> MigProfile {
        let compute = self.shapes[usize::from(shape)].compute;
        self.shapes[usize::from(shape)].name.parse().unwrap_or(MigProfile::gpu_instance(compute, 0))
    }

    /// The memory slices an instance takes, as a mask.
    fn mask(&self, i: Instance) -> u16 {
        let s = &self.shapes[usize::from(i.shape)];
        ((1u16 << s.slices) - 1) << i.start
    }

    /// Whether a layout can be made on one GPU.
    pub fn check(&self, layout: &[Instance]) -> Result<(), LayoutError> {
        let mut taken = 0u16;
        let mut owner: [Option<&'static str>; 16] = [None; 16];
        let mut compute = 0u32;
        let mut media = 0;
        for i in layout {
            let Some(s) = self.shapes.get(usize::from(i.shape)) else {
                return Err(LayoutError::UnknownProfile {
                    model: self.model,
                    profile: format!("#{}", i.shape),
                    known: self.known(),
                });
            };
            if !s.starts.contains(&i.start) {
                return Err(LayoutError::BadStart { profile: s.name, start: i.start, allowed: s.starts });
            }
            let m = self.mask(*i);
            if taken & m != 0 {
                let other = (0..16).find(|b| m & (1 << b) != 0 && owner[*b].is_some()).and_then(|b| owner[b]);
                return Err(LayoutError::Overlap { a: other.unwrap_or("another instance"), b: s.name });
            }
            taken |= m;
            for (b, o) in owner.iter_mut().enumerate() {
                if m & (1 << b) != 0 {
                    *o = Some(s.name);
                }
            }
            compute += u32::from(s.compute);
            media += usize::from(s.name.ends_with("+me"));
        }
        if compute > u32::from(self.compute_slices) {
            return Err(LayoutError::TooMuchCompute { used: compute, total: self.compute_slices });
        }
        if media > 1 {
            return Err(LayoutError::TwoMediaExtensions);
        }
        Ok(())
    }

    fn known(&self) -> String {
        self.shapes.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
    }

    /// Places these profiles on one empty GPU, if they fit together: the
    /// largest first, each at its lowest free allowed start, backtracking.
    pub fn fit(&self, profiles: &[MigProfile]) -> Result<Option<Vec<Instance>>, LayoutError> {
        let mut shapes = Vec::with_capacity(profiles.len());
        for p in profiles {
            shapes.push(self.shape_of(p).ok_or_else(|| LayoutError::UnknownProfile {
                model: self.model,
                profile: p.to_string(),
                known: self.known(),
            })?);
        }
        shapes.sort_by_key(|s| std::cmp::Reverse((self.shapes[usize::from(*s)].slices, *s)));
        let mut out = Vec::with_capacity(shapes.len());
        Ok(self.place_from(&shapes, 0, &mut out).then_some(out))
    }

    fn place_from(&self, shapes: &[u8], taken: u16, out: &mut Vec<Instance>) -> bool {
        let Some((&first, rest)) = shapes.split_first() else {
            return self.check(out).is_ok();
        };
        for &start in self.shapes[usize::from(first)].starts {
            let i = Instance { shape: first, start };
            let m = self.mask(i);
            if taken & m == 0 {
                out.push(i);
                if self.place_from(rest, taken | m, out) {
                    return true;
                }
                out.pop();
            }
        }
        false
    }

    /// The distinct sets of profiles (each sorted) of the maximal layouts,
    /// without those another set contains (`1g+2g+3g` when `1g+1g+2g+3g`
    /// fits: a placement that strands a slice).
    pub fn profile_sets(&self) -> Vec<Vec<MigProfile>> {
        let mut sets: Vec<Vec<MigProfile>> = self
            .maximal_layouts()
            .iter()
            .map(|l| {
                let mut v: Vec<MigProfile> = l.iter().map(|i| self.profile(i.shape)).collect();
                v.sort();
                v
            })
            .collect();
        sets.sort();
        sets.dedup();
        let within = |small: &[MigProfile], big: &[MigProfile]| {
            small.len() < big.len() && {
                let mut rest = big.to_vec();
                small.iter().all(|p| rest.iter().position(|q| q == p).map(|i| rest.remove(i)).is_some())
            }
        };
        let keep: Vec<bool> = sets.iter().map(|s| !sets.iter().any(|b| within(s, b))).collect();
        sets.into_iter().zip(keep).filter_map(|(s, k)| k.then_some(s)).collect()
    }

    /// Every layout that no instance could be added to (without the `+me`
    /// shapes, which only a request for them needs), each sorted by start.
    pub fn maximal_layouts(&self) -> Vec<Vec<Instance>> {
        let shapes: Vec<u8> =
            (0..self.shapes.len() as u8).filter(|s| !self.shapes[usize::from(*s)].name.ends_with("+me")).collect();
        let mut out = Vec::new();
        let mut cur = Vec::new();
        self.grow(&shapes, 0, 0, &mut cur, &mut out);
        out
    }

    /// Adds instances at slices `from..` in every way, keeping the layouts
    /// that cannot take one more.
    fn grow(&self, shapes: &[u8], from: u8, taken: u16, cur: &mut Vec<Instance>, out: &mut Vec<Vec<Instance>>) {
        let mut placed_any = false;
        for slice in from..self.memory_slices {
            for &s in shapes {
                let i = Instance { shape: s, start: slice };
                let m = self.mask(i);
                if !self.shapes[usize::from(s)].starts.contains(&slice)
                    || taken & m != 0
                    || (slice + self.shapes[usize::from(s)].slices) > self.memory_slices
                {
                    continue;
                }
                cur.push(i);
                if self.check(cur).is_ok() {
                    placed_any = true;
                    self.grow(shapes, slice + 1, taken | m, cur, out);
                }
                cur.pop();
            }
        }
        if !placed_any && !cur.is_empty() && self.is_maximal(shapes, cur) {
            out.push(cur.clone());
        }
    }

    fn is_maximal(&self, shapes: &[u8], layout: &[Instance]) -> bool {
        let taken = layout.iter().fold(0u16, |t, i| t | self.mask(*i));
        !shapes.iter().any(|&s| {
            self.shapes[usize::from(s)].starts.iter().any(|&start| {
                let i = Instance { shape: s, start };
                let mut with = layout.to_vec();
                with.push(i);
                taken & self.mask(i) == 0 && self.check(&with).is_ok()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> MigProfile {
        s.parse().expect("profile")
    }

    #[test]
    fn layouts_are_checked_as_the_driver_does() {
        let g = geometry("A100-40GB").expect("known");
        let at = |name: &str, start: u8| Instance { shape: g.shape_of(&p(name)).expect("shape"), start };
        let cases: Vec<(Vec<Instance>, Result<(), &str>)> = vec![
            (vec![at("3g.20gb", 0), at("3g.20gb", 4)], Ok(())),
            (vec![at("4g.20gb", 0), at("3g.20gb", 4)], Ok(())),
            (vec![at("3g.20gb", 4), at("2g.10gb", 0), at("1g.5gb", 2), at("1g.5gb", 3)], Ok(())),
            (vec![at("3g.20gb", 2)], Err("cannot start")),
            (vec![at("3g.20gb", 0), at("2g.10gb", 2)], Err("overlap")),
            (vec![at("1g.5gb+me", 0), at("1g.5gb+me", 1)], Err("media")),
            (vec![at("7g.40gb", 0)], Ok(())),
        ];
        for (layout, want) in cases {
            let got = g.check(&layout).map_err(|e| e.to_string());
            match want {
                Ok(()) => assert!(got.is_ok(), "{layout:?}: {got:?}"),
                Err(w) => assert!(got.as_ref().is_err_and(|e| e.contains(w)), "{layout:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn profiles_are_fitted_or_said_not_to_fit() {
        let g = geometry("H100-80GB").expect("known");
        let fit = |ps: &[&str]| g.fit(&ps.iter().map(|s| p(s)).collect::<Vec<_>>()).expect("known profiles");
        assert!(fit(&["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]).is_some());
        assert!(fit(&["1g.10gb"; 7]).is_some());
        assert!(fit(&["1g.10gb"; 8]).is_none(), "seven compute slices");
        assert!(fit(&["4g.40gb", "4g.40gb"]).is_none());
        assert!(fit(&["1g.20gb"; 4]).is_some(), "four fit, as -lgip says");
        let e = g.fit(&[p("1g.5gb")]).expect_err("an A100-40GB profile");
        assert!(e.to_string().contains("H100-80GB has no MIG profile 1g.5gb"), "{e}");
    }

    #[test]
    fn maximal_layouts_are_valid_full_and_include_the_usual_ones() {
        for g in GEOMETRIES {
            let all = g.maximal_layouts();
            assert!(!all.is_empty(), "{}", g.model);
            for l in &all {
                g.check(l).unwrap_or_else(|e| panic!("{} {l:?}: {e}", g.model));
            }
            let names = |l: &Vec<Instance>| {
                let mut v: Vec<&str> = l.iter().map(|i| g.shapes[usize::from(i.shape)].name).collect();
                v.sort_unstable();
                v.join("+")
            };
            let set: Vec<String> = all.iter().map(names).collect();
            let whole = g.shapes.iter().find(|s| s.slices == g.memory_slices).expect("a whole-GPU profile").name;
            assert!(set.iter().any(|s| s == whole), "{}: {set:?}", g.model);
        }
        let h100: Vec<String> = geometry("H100-80GB")
            .expect("known")
            .maximal_layouts()
            .iter()
            .map(|l| l.iter().map(|i| format!("{}@{}", i.shape, i.start)).collect::<Vec<_>>().join(","))
            .collect();
        assert!(h100.len() > 10 && h100.len() < 200, "{}", h100.len());
    }
}
