//! Unit tests of the QP state machine: kernel numbers (`numbers.rs`), the transition table
//! (`table.rs`) and the rules of each state (`machine.rs`).

use super::table::*;
use super::*;

mod machine;
mod numbers;
mod table;

const RC: QpType = QpType::Rc;
const UC: QpType = QpType::Uc;
const UD: QpType = QpType::Ud;
const GSI: QpType = QpType::Gsi;

fn to_init(ty: QpType) -> AttrMask {
    transition_rule(QpState::Reset, QpState::Init, ty)
        .unwrap()
        .required
}
fn to_rtr(ty: QpType) -> AttrMask {
    transition_rule(QpState::Init, QpState::Rtr, ty)
        .unwrap()
        .required
}
fn to_rts(ty: QpType) -> AttrMask {
    transition_rule(QpState::Rtr, QpState::Rts, ty)
        .unwrap()
        .required
}
