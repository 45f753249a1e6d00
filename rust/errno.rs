// SPDX-License-Identifier: GPL-2.0

//! Error codes the verbs need that `kernel::error::code` does not declare.

use crate::bindings as b;
use kernel::error::Error;

/// `EOPNOTSUPP`: the operation or attribute is not supported (what ib_core expects for
/// unsupported verbs and flags).
pub fn eopnotsupp() -> Error {
    Error::from_errno(-(b::EOPNOTSUPP as i32))
}

/// `EADDRINUSE`: the RoCEv2 UDP port is taken in this network namespace.
pub fn eaddrinuse() -> Error {
    Error::from_errno(-(b::EADDRINUSE as i32))
}
