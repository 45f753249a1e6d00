// SPDX-License-Identifier: GPL-2.0

//! The RoCEv2 UDP socket (port 4791) of each network namespace: created on the first
//! [`acquire`], shared and refcounted through [`TunnelRef`], released on the last drop or when
//! the namespace dies ([`PernetRegistration`]), whichever comes first.
//!
//! Received packets are handed, in softirq context, to one module-global hook
//! ([`set_rx_hook`]); the usual hook, [`dispatch`], passes each one to the [`RxListener`] (the
//! rvrdma device) whose net device it arrived on.

use super::netdev::NetDev;
use super::skb::Skb;
use crate::bindings as b;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
use kernel::{
    prelude::*,
    sync::{
        lock::{mutex::MutexBackend, GlobalGuard, GlobalLock, GlobalLockBackend},
        Arc, LockClassKey,
    },
    time::{delay::fsleep, Delta},
    types::Opaque,
};

use super::roce::ROCE_V2_UDP_DPORT;

/// The `encap_type` the UDP layer needs for `encap_rcv` to be called (rxe uses 1 too).
const ENCAP_TYPE: u8 = 1;

/// The sockets of one namespace.
///
/// # Invariants
///
/// `sk4` (and `sk6` when set) carry one `sock_hold` reference each, so their memory stays valid
/// after the sockets are released; `released` tells whether `udp_tunnel_sock_release` ran.
struct Tunnel {
    /// The namespace, only compared as a key; never dereferenced.
    net: usize,
    sk4: NonNull<b::sock>,
    sk6: Option<NonNull<b::sock>>,
    released: AtomicBool,
}

// SAFETY: the socket pointers are counted references usable from any CPU; `released` is atomic.
unsafe impl Send for Tunnel {}
// SAFETY: `&Tunnel` only reads the pointers and the atomic flag.
unsafe impl Sync for Tunnel {}

/// What `sk_user_data` of our sockets points to: only its non-nullness matters (it is cleared
/// by `udp_tunnel_sock_release`).
static RX_CONTEXT: u64 = 0;

impl Tunnel {
    /// Creates and binds the sockets of `net` (process context, may sleep).
    fn open(net: *mut b::net) -> Result<Tunnel> {
        let sk4 = match open_sock(net, false) {
            Ok(sk) => sk,
            Err(e) if e == super::errno(b::EADDRINUSE) => {
                pr_warn!(
                    "UDP port {} is in use in this netns (rdma_rxe?): rvrdma cannot carry traffic here\n",
                    ROCE_V2_UDP_DPORT
                );
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let sk6 = match open_sock(net, true) {
            Ok(sk) => Some(sk),
            Err(e) if e == super::errno(b::EAFNOSUPPORT) => None,
            Err(e) => {
                if e == super::errno(b::EADDRINUSE) {
                    pr_warn!(
                        "UDP port {} (IPv6) is in use in this netns (rdma_rxe?)\n",
                        ROCE_V2_UDP_DPORT
                    );
                }
                // SAFETY: `sk4` was just created by `open_sock` and is released once here.
                unsafe { close_sock(sk4) };
                return Err(e);
            }
        };
        // INVARIANT: `open_sock` took a reference on each socket.
        Ok(Tunnel {
            net: net as usize,
            sk4,
            sk6,
            released: AtomicBool::new(false),
        })
    }

    /// Releases the sockets (process context). Idempotent.
    fn release(&self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        // SAFETY: the sockets are open (not yet released, checked by the flag above) and
        // `udp_tunnel_sock_release` is called once for each.
        unsafe {
            b::udp_tunnel_sock_release(self.sk4.as_ptr());
            if let Some(sk6) = self.sk6 {
                b::udp_tunnel_sock_release(sk6.as_ptr());
            }
        }
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.release();
        // SAFETY: by the type invariant each pointer carries one reference, dropped here.
        unsafe {
            b::rvr_sock_put(self.sk4.as_ptr());
            if let Some(sk6) = self.sk6 {
                b::rvr_sock_put(sk6.as_ptr());
            }
        }
    }
}

/// Creates a kernel UDP socket on port 4791 of `net` (IPv6 with `v6only`), sets it up as a UDP
/// tunnel socket calling [`encap_rcv`], and takes a reference on its `struct sock`.
fn open_sock(net: *mut b::net, ipv6: bool) -> Result<NonNull<b::sock>> {
    let mut cfg = b::udp_port_cfg {
        family: if ipv6 { b::AF_INET6 } else { b::AF_INET } as u8,
        local_udp_port: ROCE_V2_UDP_DPORT.to_be(),
        ..Default::default()
    };
    if ipv6 {
        cfg.set_ipv6_v6only(1);
    }
    let mut sock: *mut b::socket = core::ptr::null_mut();
    // SAFETY: `net` is a live namespace (the caller holds a device of it); `cfg` and `sock` are
    // valid for the call, which runs in process context.
    kernel::error::to_result(unsafe { b::rvr_udp_sock_create(net, &mut cfg, &mut sock) })?;
    // SAFETY: on success `sock` is a live kernel socket with its `sk`.
    let sk = unsafe { b::rvr_socket_sk(sock) };
    let mut tcfg = b::udp_tunnel_sock_cfg {
        sk_user_data: core::ptr::from_ref(&RX_CONTEXT).cast_mut().cast(),
        encap_type: ENCAP_TYPE,
        encap_rcv: Some(encap_rcv),
        ..Default::default()
    };
    // SAFETY: `sk` is the fresh socket of `net`; `tcfg` is valid for the call. `encap_rcv` stays
    // callable until the socket is released: the pernet registration releases every socket and
    // waits for RCU readers before the module can go.
    unsafe { b::setup_udp_tunnel_sock(net, sk, &mut tcfg) };
    // SAFETY: `sk` is live; the reference is dropped by `Tunnel::drop`.
    unsafe { b::rvr_sock_hold(sk) };
    // `sk` of a created socket is never null.
    NonNull::new(sk).ok_or(EINVAL)
}

/// Releases a socket made by [`open_sock`] and drops its reference.
///
/// # Safety
///
/// `sk` must come from [`open_sock`] and not have been released yet.
unsafe fn close_sock(sk: NonNull<b::sock>) {
    // SAFETY: the caller guarantees `sk` is open, with the reference `open_sock` took.
    unsafe {
        b::udp_tunnel_sock_release(sk.as_ptr());
        b::rvr_sock_put(sk.as_ptr());
    }
}

/// The signature of the module-global receive hook: called in softirq context (BH off, RCU read
/// side) with each packet received on a rvrdma socket, `skb->data` at the UDP header and the
/// network header set (what [`Skb::parse_roce`] expects). Must not sleep.
pub type RxHook = fn(Skb);

/// The receive hook, a `fn(Skb)` stored as a pointer; null when none is set.
static RX_HOOK: AtomicPtr<()> = AtomicPtr::new(core::ptr::null_mut());

/// Sets the function that receives every RoCEv2 packet (see [`RxHook`]).
pub fn set_rx_hook(f: RxHook) {
    swap_rx_hook(Some(f));
}

/// Removes the receive hook: packets are dropped from then on (a call already running may still
/// finish; `synchronize_rcu()` waits for it).
pub fn clear_rx_hook() {
    swap_rx_hook(None);
}

/// Installs `f` (or none) as the receive hook and returns the previous one.
pub fn swap_rx_hook(f: Option<RxHook>) -> Option<RxHook> {
    let new = f.map_or(core::ptr::null_mut(), |f| f as *mut ());
    let old = RX_HOOK.swap(new, Ordering::AcqRel);
    hook_from_ptr(old)
}

/// The hook a `RX_HOOK` value stands for.
fn hook_from_ptr(p: *mut ()) -> Option<RxHook> {
    if p.is_null() {
        return None;
    }
    // SAFETY: every non-null value of `RX_HOOK` was stored from a `fn(Skb)` by `swap_rx_hook`.
    Some(unsafe { core::mem::transmute::<*mut (), RxHook>(p) })
}

/// A receiver of RoCEv2 packets (one rvrdma device's datapath), registered with [`listen`].
pub trait RxListener: Send + Sync {
    /// Whether `skb` arrived on one of the listener's net devices.
    fn accepts(&self, skb: &Skb) -> bool;
    /// Handles a packet [`accepts`](RxListener::accepts) took: softirq context, RCU read side;
    /// must not sleep.
    fn receive(&self, skb: Skb);
}

/// The lock class of `LISTENERS`.
enum Listeners {}

impl GlobalLockBackend for Listeners {
    const NAME: &'static CStr = c"rvrdma_rx_devices";
    type Item = KVec<Arc<dyn RxListener>>;
    // Writers only, in process context: the receive path reads `PUBLISHED`.
    type Backend = MutexBackend;

    fn get_lock_class() -> Pin<&'static LockClassKey> {
        kernel::static_lock_class!()
    }
}

// SAFETY: initialised once by `rx_init` (guarded by `LISTENERS_STATE`) and used only once
// `LISTENERS_STATE` says so; `Listeners` is the backend of this lock only.
static LISTENERS: GlobalLock<Listeners> = unsafe { GlobalLock::new(KVec::new()) };

/// `LISTENERS` is not initialised yet.
const UNINIT: u8 = 0;
/// `rx_init` is initialising `LISTENERS`.
const INITIALISING: u8 = 1;
/// `LISTENERS` is initialised and usable.
const READY: u8 = 2;

/// Where `LISTENERS` is in its initialisation.
static LISTENERS_STATE: AtomicU8 = AtomicU8::new(UNINIT);

/// The locked listener list, or `None` before [`rx_init`] has run. Writers only: [`dispatch`]
/// reads [`PUBLISHED`].
fn listeners() -> Option<GlobalGuard<Listeners>> {
    (LISTENERS_STATE.load(Ordering::Acquire) == READY).then(|| LISTENERS.lock())
}

/// A copy of the listener list for [`dispatch`] to read under RCU, with no lock and no
/// reference taken per packet; null when there is no listener.
///
/// # Invariants
///
/// Non-null values come from `KBox::into_raw` and are stored only by [`publish`], under the
/// `LISTENERS` lock. A value is freed only through the [`Retired`] that took it out, after a
/// grace period that began once it was replaced; until then its listeners are alive (it holds
/// a reference to each).
static PUBLISHED: AtomicPtr<KVec<Arc<dyn RxListener>>> = AtomicPtr::new(core::ptr::null_mut());

/// Publishes a copy of the locked `list` and returns the copy it replaces, for [`retire`] once
/// the lock is dropped. Process context.
fn publish(list: &GlobalGuard<Listeners>) -> Result<Retired> {
    let new = if list.is_empty() {
        core::ptr::null_mut()
    } else {
        let mut copy = KVec::with_capacity(list.len(), GFP_KERNEL)?;
        for l in list.iter() {
            copy.push(l.clone(), GFP_KERNEL)?;
        }
        KBox::into_raw(KBox::new(copy, GFP_KERNEL)?)
    };
    // INVARIANT: stored under the lock (the caller holds it); the value it replaces goes into
    // the `Retired`, its only owner from here.
    Ok(Retired(PUBLISHED.swap(new, Ordering::AcqRel)))
}

/// A listener list taken out of [`PUBLISHED`], still possibly read by [`dispatch`]: give it to
/// [`retire`] (dropped, it leaks).
///
/// # Invariants
///
/// The pointer is null or a value [`publish`] swapped out of `PUBLISHED`, owned by this
/// `Retired` alone.
#[must_use]
struct Retired(*mut KVec<Arc<dyn RxListener>>);

/// Waits until no [`dispatch`] reads `old`, then frees it (dropping its listener references).
/// Process context: sleeps.
fn retire(old: Retired) {
    if old.0.is_null() {
        return;
    }
    crate::sync::rcu::synchronize();
    // SAFETY: `old` came from `KBox::into_raw` (type invariant of `PUBLISHED`) and is owned by
    // `old` alone (type invariant of `Retired`); every read-side section that may have seen it
    // has ended.
    drop(unsafe { KBox::from_raw(old.0) });
}

/// Sets up the listener list and installs [`dispatch`] as the receive hook. Call it in module
/// init, before any [`listen`]; later calls only install the hook again.
pub fn rx_init() {
    if LISTENERS_STATE
        .compare_exchange(UNINIT, INITIALISING, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        // SAFETY: only the one caller that moved the state away from `UNINIT` gets here, so
        // `init` runs once; every other use goes through `listeners()`, which waits for `READY`,
        // set once `init` has returned.
        unsafe { LISTENERS.init() };
        LISTENERS_STATE.store(READY, Ordering::Release);
    }
    set_rx_hook(dispatch);
}

/// Makes [`dispatch`] hand `l` the packets it accepts. Process context: waits for an RCU grace
/// period.
pub fn listen(l: Arc<dyn RxListener>) -> Result {
    let old = {
        let mut list = listeners().ok_or(EINVAL)?;
        list.push(l, GFP_KERNEL)?;
        match publish(&list) {
            Ok(old) => old,
            Err(e) => {
                // Not published: leave both lists as they were.
                list.pop();
                return Err(e);
            }
        }
    };
    retire(old);
    Ok(())
}

/// Stops dispatching packets to `l`; packets being handled by it are done when this returns
/// (it waits for an RCU grace period). Process context.
pub fn unlisten(l: &dyn RxListener) {
    let same = |d: &Arc<dyn RxListener>| {
        core::ptr::eq(
            Arc::as_ptr(d).cast::<u8>(),
            core::ptr::from_ref(l).cast::<u8>(),
        )
    };
    let (removed, old) = {
        let Some(mut list) = listeners() else { return };
        let Some(i) = list.iter().position(same) else {
            return;
        };
        let removed = list.remove(i);
        // The listener must be out of the published list before this returns (its device is
        // freed next), and the other devices must stay in it: wait for memory.
        let old = loop {
            match publish(&list) {
                Ok(old) => break old,
                Err(_) => {
                    pr_warn!("no memory to unlist a device; retrying\n");
                    fsleep(Delta::from_millis(10));
                }
            }
        };
        if list.is_empty() {
            // Free the storage: the static is never dropped.
            *list = KVec::new();
        }
        (removed, old)
    };
    retire(old);
    // Dropped after the grace period, outside the lock.
    drop(removed);
}

/// The receive hook [`rx_init`] installs (softirq): hands the packet to the first listener that
/// accepts it, or drops it when none does.
pub fn dispatch(skb: Skb) {
    let _rcu = kernel::sync::rcu::read_lock();
    let list = PUBLISHED.load(Ordering::Acquire);
    // SAFETY: a published list stays allocated, with its listeners alive, until a grace period
    // after it is replaced (type invariant of `PUBLISHED`), and this read-side section began
    // before any such period could end.
    let l = unsafe { list.as_ref() }.and_then(|list| list.iter().find(|l| l.accepts(&skb)));
    match l {
        Some(l) => l.receive(skb),
        // Not ours (e.g. a netdev without an rvrdma device): drop.
        None => drop(skb),
    }
}

/// `encap_rcv` of our sockets: hands the skb to the hook; always consumes it (returns 0).
///
/// # Safety
///
/// Called by the UDP layer in softirq context, under `rcu_read_lock`, with a live socket and an
/// skb whose ownership passes to us.
unsafe extern "C" fn encap_rcv(sk: *mut b::sock, skb: *mut b::sk_buff) -> c_int {
    // SAFETY: the UDP layer passes ownership of a live skb.
    let Some(skb) = (unsafe { Skb::from_raw(skb) }) else {
        return 0;
    };
    // SAFETY: `sk` is live and we are in an RCU read-side section (BH context).
    if unsafe { b::rvr_rcu_dereference_sk_user_data(sk) }.is_null() {
        // The socket is being released: drop.
        return 0;
    }
    let Some(f) = hook_from_ptr(RX_HOOK.load(Ordering::Acquire)) else {
        return 0;
    };
    f(skb);
    0
}

/// One namespace in the table.
struct Entry {
    tun: Arc<Tunnel>,
    refs: usize,
}

kernel::sync::global_lock! {
    // SAFETY: initialised by `PernetRegistration::register`, before any other use.
    unsafe(uninit) static TUNNELS: Mutex<KVec<Entry>> = KVec::new();
}

/// Set once `TUNNELS` is initialised.
static TABLE_READY: AtomicBool = AtomicBool::new(false);

/// A counted use of the RoCEv2 socket of one namespace; the last drop releases the socket
/// (process context). After the namespace died the sockets are already released: dropping
/// then only frees memory, and [`TunnelRef::is_live`] is false.
pub struct TunnelRef {
    tun: Arc<Tunnel>,
}

impl TunnelRef {
    /// Whether the sockets are still open (false once their namespace died).
    pub fn is_live(&self) -> bool {
        !self.tun.released.load(Ordering::Acquire)
    }

    /// The socket that owns transmitted skbs of the given family (the IPv6 one when there is one,
    /// else the IPv4 one, as rxe does). The pointer stays valid while `self` lives.
    pub(crate) fn owner_sk(&self, ipv4: bool) -> *mut b::sock {
        match (ipv4, self.tun.sk6) {
            (false, Some(sk6)) => sk6.as_ptr(),
            _ => self.tun.sk4.as_ptr(),
        }
    }

    /// The IPv6 socket for the IPv6 route lookup, or null.
    pub(crate) fn sk6(&self) -> *mut b::sock {
        self.tun.sk6.map_or(core::ptr::null_mut(), NonNull::as_ptr)
    }
}

impl Drop for TunnelRef {
    fn drop(&mut self) {
        let last = {
            let mut table = TUNNELS.lock();
            let Some(i) = table.iter().position(|e| Arc::ptr_eq(&e.tun, &self.tun)) else {
                // The namespace died and released the sockets already.
                return;
            };
            table[i].refs -= 1;
            if table[i].refs > 0 {
                return;
            }
            let e = table.remove(i).map_err(|_| ());
            e.ok().map(|e| e.tun)
        };
        if let Some(tun) = last {
            tun.release();
            // Process context (documented); no lock is held.
            crate::sync::rcu::synchronize();
        }
    }
}

/// Returns the RoCEv2 socket of `ndev`'s namespace, creating it on first use. Process context
/// (may sleep). `EADDRINUSE` (with one warning) when another user, e.g. rdma_rxe, holds port 4791
/// in that namespace.
pub fn acquire(ndev: &NetDev) -> Result<TunnelRef> {
    if !TABLE_READY.load(Ordering::Acquire) {
        return Err(EINVAL);
    }
    // SAFETY: `ndev` is live, and so is its namespace.
    let net = unsafe { b::rvr_dev_net(ndev.as_raw()) };
    let mut table = TUNNELS.lock();
    if let Some(e) = table.iter_mut().find(|e| e.tun.net == net as usize) {
        e.refs += 1;
        return Ok(TunnelRef { tun: e.tun.clone() });
    }
    let tun = Arc::new(Tunnel::open(net)?, GFP_KERNEL)?;
    table.push(
        Entry {
            tun: tun.clone(),
            refs: 1,
        },
        GFP_KERNEL,
    )?;
    Ok(TunnelRef { tun })
}

/// Number of namespaces that currently have a rvrdma socket (for tests and diagnostics).
pub fn open_count() -> usize {
    if !TABLE_READY.load(Ordering::Acquire) {
        return 0;
    }
    TUNNELS.lock().len()
}

/// The pernet registration whose `.exit` releases a dying namespace's sockets. Create exactly
/// one, in module init, before anything calls [`acquire`], and drop it after the last user of the
/// sockets (module field order: declare it last, so it is dropped last). Dropping it runs `.exit`
/// for every namespace (releasing every socket, even ones still referenced by a [`TunnelRef`])
/// and waits for RCU readers, so no `encap_rcv` runs afterwards.
///
/// # Invariants
///
/// `ops` is registered with `register_pernet_subsys` for the lifetime of the value.
#[pin_data(PinnedDrop)]
pub struct PernetRegistration {
    #[pin]
    ops: Opaque<b::pernet_operations>,
}

// SAFETY: the ops are only touched by the netns core under its own locking.
unsafe impl Send for PernetRegistration {}
// SAFETY: no `&self` method touches the ops.
unsafe impl Sync for PernetRegistration {}

impl PernetRegistration {
    /// Initialises the socket table and registers the pernet operations. `EBUSY` if called twice.
    pub fn register() -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            ops <- Opaque::try_ffi_init(|slot: *mut b::pernet_operations| {
                if TABLE_READY.load(Ordering::Acquire) {
                    return Err(EBUSY);
                }
                // SAFETY: called once (guarded by `TABLE_READY`, set just after), in module
                // init, before any other use of `TUNNELS`.
                unsafe { TUNNELS.init() };
                TABLE_READY.store(true, Ordering::Release);
                // A zeroed `pernet_operations` with an exit callback is valid (no per-net data).
                // SAFETY: `slot` is valid for writes.
                unsafe {
                    slot.write(core::mem::zeroed());
                    (*slot).exit = Some(net_exit);
                }
                // INVARIANT: on success the ops are registered.
                // SAFETY: `slot` is pinned and unregistered in `drop` before it is freed.
                kernel::error::to_result(unsafe { b::register_pernet_subsys(slot) })
            }),
        })
    }
}

/// Releases the sockets of `net`, if any; returns whether there were any.
fn release_net(net: usize) -> bool {
    let tun = {
        let mut table = TUNNELS.lock();
        let Some(i) = table.iter().position(|e| e.tun.net == net) else {
            return false;
        };
        match table.remove(i) {
            Ok(e) => e.tun,
            Err(_) => return false,
        }
    };
    tun.release();
    true
}

/// What the pernet `.exit` does for `ndev`'s namespace, without the namespace dying: releases its
/// sockets even if [`TunnelRef`]s remain (for KUnit).
pub(crate) fn release_netns_of(ndev: &NetDev) {
    // SAFETY: `ndev` is live, and so is its namespace.
    let net = unsafe { b::rvr_dev_net(ndev.as_raw()) };
    // SAFETY: the namespace pointer is only used as a key.
    unsafe { net_exit(net) };
}

/// `.exit` of the pernet operations: the namespace `net` is dying.
///
/// # Safety
///
/// Called by the netns core in process context.
unsafe extern "C" fn net_exit(net: *mut b::net) {
    if release_net(net as usize) {
        // Process context, no lock held: afterwards no `encap_rcv` runs on the released sockets.
        crate::sync::rcu::synchronize();
    }
}

#[pinned_drop]
impl PinnedDrop for PernetRegistration {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: by the type invariant the ops are registered; this runs `.exit` for every
        // namespace.
        unsafe { b::unregister_pernet_subsys(self.ops.get()) };
        // Every namespace's exit ran, so the table is empty; free its storage.
        let rest = core::mem::take(&mut *TUNNELS.lock());
        for e in rest.iter() {
            e.tun.release();
        }
        drop(rest);
        // Process context (module exit): waits for `encap_rcv` callers.
        crate::sync::rcu::synchronize();
    }
}
