//! Rule 2 of "a job never runs on two nodes at once" (ARCHITECTURE.md): the
//! poller carries out a command only while the session that received it is
//! the agent's current one, and holds the session lock while it does, so
//! whatever it starts is in the next registration's list of what runs here.
//! A poll answer that arrives after its session ended (the control plane
//! declared the node down and a new session registered) is dropped whole.

use std::sync::Mutex;

use gpool_api::agent as wire;

/// Carries out `commands` past sequence `after` with `run`, each under the
/// session lock and only while session `epoch` is current. The last
/// sequence carried out, or `None` once the session is no longer current
/// (what is left is for the current session to receive again).
pub(crate) fn carry_out<C>(
    commands: Vec<wire::Sequenced>,
    mut after: u64,
    epoch: u64,
    current: &Mutex<Option<(u64, C)>>,
    mut run: impl FnMut(wire::Command),
) -> Option<u64> {
    for c in commands {
        if c.seq <= after {
            continue;
        }
        let session = current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if session.as_ref().map(|(e, _)| *e) != Some(epoch) {
            return None;
        }
        run(c.command);
        drop(session);
        after = c.seq;
    }
    Some(after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signal(seq: u64, job: u64) -> wire::Sequenced {
        wire::Sequenced {
            seq,
            command: wire::Command::Signal { replica: wire::ReplicaId { job, attempt: 1, rank: 0 }, signal: 15 },
        }
    }

    fn jobs(ran: &[wire::Command]) -> Vec<u64> {
        ran.iter()
            .map(|c| match c {
                wire::Command::Signal { replica, .. } => replica.job,
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn commands_run_only_while_their_session_is_current() {
        struct Case {
            name: &'static str,
            current: Option<u64>,
            after: u64,
            want_ran: &'static [u64],
            want: Option<u64>,
        }
        let cases = [
            Case {
                name: "the current session runs its commands",
                current: Some(5),
                after: 0,
                want_ran: &[1, 2, 3],
                want: Some(3),
            },
            Case {
                name: "acknowledged ones are not run again",
                current: Some(5),
                after: 2,
                want_ran: &[3],
                want: Some(3),
            },
            Case {
                name: "a late answer to an ended session runs nothing",
                current: Some(6),
                after: 0,
                want_ran: &[],
                want: None,
            },
            Case { name: "nor while no session is open", current: None, after: 0, want_ran: &[], want: None },
        ];
        for case in cases {
            let current = Mutex::new(case.current.map(|e| (e, ())));
            let mut ran = Vec::new();
            let got =
                carry_out(vec![signal(1, 1), signal(2, 2), signal(3, 3)], case.after, 5, &current, |c| ran.push(c));
            assert_eq!((jobs(&ran), got), (case.want_ran.to_vec(), case.want), "{}", case.name);
        }
    }

    #[test]
    fn the_session_lock_is_held_while_a_command_runs() {
        // A registration that would end the session waits for the command,
        // so what the command started is in that registration's list.
        let current = Mutex::new(Some((5u64, ())));
        let mut held = Vec::new();
        let got =
            carry_out(vec![signal(1, 1), signal(2, 2)], 0, 5, &current, |_| held.push(current.try_lock().is_err()));
        assert_eq!((held, got), (vec![true, true], Some(2)));
        assert!(current.try_lock().is_ok(), "and freed after");
    }
}
