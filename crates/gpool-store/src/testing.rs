//! A throwaway PostgreSQL server on loopback for tests and benchmarks
//! (written on the `pg` branch).
