// SPDX-License-Identifier: GPL-2.0

//! A spinlock that disables local interrupts while held (`spin_lock_irqsave`).
//!
//! Verbs such as `post_send`, `post_recv`, `poll_cq` and `req_notify_cq` may be called from any
//! context, hard IRQ included, so the locks they take must be IRQ-safe. The kernel crate's
//! `SpinLock` is the plain `spin_lock`; this backend plugs `spin_lock_irqsave` into the same
//! generic [`kernel::sync::lock::Lock`].

use crate::bindings as b;
use kernel::sync::lock::{Backend, Lock};

/// A spinlock taken with local interrupts disabled.
pub type IrqSpinLock<T> = Lock<T, IrqSpinLockBackend>;

/// Creates an [`IrqSpinLock`] initialiser with a static lock class named after the call site.
#[macro_export]
macro_rules! new_irq_spinlock {
    ($inner:expr $(, $name:literal)? $(,)?) => {
        $crate::sync::irq_spinlock::IrqSpinLock::new(
            $inner,
            kernel::optional_name!($($name)?),
            kernel::static_lock_class!(),
        )
    };
}

/// The `spin_lock_irqsave` lock backend.
pub struct IrqSpinLockBackend;

// SAFETY: `lock` and `try_lock` take the spinlock with interrupts saved and disabled, `unlock`
// releases it restoring the flags saved by the same acquisition, so only one owner exists at a
// time; `relock` uses the default implementation, which calls `lock` again.
unsafe impl Backend for IrqSpinLockBackend {
    type State = b::spinlock_t;
    type GuardState = kernel::ffi::c_ulong;

    unsafe fn init(
        ptr: *mut Self::State,
        name: *const kernel::ffi::c_char,
        key: *mut b::lock_class_key,
    ) {
        // SAFETY: the caller passes valid pointers with the required lifetimes.
        unsafe { b::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: the caller guarantees the lock was initialised.
        unsafe { b::rvr_spin_lock_irqsave(ptr) }
    }

    unsafe fn try_lock(ptr: *mut Self::State) -> Option<Self::GuardState> {
        let mut flags = 0;
        // SAFETY: the caller guarantees the lock was initialised; `flags` is a valid out slot.
        unsafe { b::rvr_spin_trylock_irqsave(ptr, &mut flags) }.then_some(flags)
    }

    unsafe fn unlock(ptr: *mut Self::State, guard_state: &Self::GuardState) {
        // SAFETY: the caller owns the lock; the flags come from its acquisition.
        unsafe { b::rvr_spin_unlock_irqrestore(ptr, *guard_state) }
    }

    // Every guard asserts its lock: a call into C that does nothing without lockdep, made only
    // when lockdep is there to check it.
    #[cfg(CONFIG_LOCKDEP)]
    unsafe fn assert_is_held(ptr: *mut Self::State) {
        // SAFETY: the caller guarantees the lock was initialised.
        unsafe { b::spin_assert_is_held(ptr) }
    }

    #[cfg(not(CONFIG_LOCKDEP))]
    unsafe fn assert_is_held(_ptr: *mut Self::State) {}
}
