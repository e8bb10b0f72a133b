//! `gpool whoami`: who the token belongs to.

use gpool_api as api;

use super::ListArgs;
use crate::output::{Output, emit};

pub(crate) fn run(a: ListArgs) -> anyhow::Result<()> {
    let w: api::WhoAmI = a.connect.client()?.get("/whoami")?;
    emit(&render(&w, a.output)?);
    Ok(())
}

/// `ana (team ml, user)`.
pub(crate) fn render(w: &api::WhoAmI, output: Output) -> anyhow::Result<String> {
    match output {
        Output::Json | Output::Yaml => output.data(w),
        Output::Table | Output::Wide => Ok(format!("{} (team {}, {})\n", w.user, w.team, w.role)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::assert_snapshot;

    #[test]
    fn whoami_names_user_team_and_role() {
        let w = api::WhoAmI { user: "ana".into(), team: "ml".into(), role: "admin".into() };
        assert_snapshot("whoami.txt", &render(&w, Output::Table).unwrap());
        assert_snapshot("whoami.json", &render(&w, Output::Json).unwrap());
    }
}
