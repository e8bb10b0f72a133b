//! Unit tests of the controller.
