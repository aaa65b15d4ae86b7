//! Expansion snapshot tests and unit tests of the parsers.
