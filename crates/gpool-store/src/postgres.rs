//! The PostgreSQL store (written on the `pg` branch).

use crate::{EventRow, JobQuery, JobRow, NodeRow, SampleRow, Store, StoreError, TokenRow, Write};

/// A connection to a PostgreSQL database.
pub struct Postgres {
    _url: String,
}

impl Postgres {
    /// Connects and migrates.
    pub fn connect(url: &str) -> Result<Postgres, StoreError> {
        Err(StoreError::Open { path: url.into(), why: "PostgreSQL support is being written".into() })
    }
}

impl Store for Postgres {
    fn backend(&self) -> &'static str {
        "postgres"
    }
    fn commit(&mut self, _: &[Write]) -> Result<(), StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
    fn job(&mut self, _: u64) -> Result<Option<JobRow>, StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
    fn jobs(&mut self, _: &JobQuery) -> Result<Vec<JobRow>, StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
    fn jobs_in_states(&mut self, _: &[&str]) -> Result<Vec<JobRow>, StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
    fn max_job_id(&mut self) -> Result<u64, StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
    fn tokens(&mut self) -> Result<Vec<TokenRow>, StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
    fn events(&mut self, _: u64, _: Option<u64>, _: u32) -> Result<Vec<EventRow>, StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
    fn max_event_seq(&mut self) -> Result<u64, StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
    fn meta(&mut self, _: &str) -> Result<Option<String>, StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
    fn samples(&mut self, _: u64) -> Result<Vec<SampleRow>, StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
    fn nodes(&mut self) -> Result<Vec<NodeRow>, StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
    fn lead(&mut self, _: bool) -> Result<bool, StoreError> {
        Err(StoreError::Postgres("unimplemented".into()))
    }
}
