//! Shared bits of the example operators.
