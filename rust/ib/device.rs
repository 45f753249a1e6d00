// SPDX-License-Identifier: GPL-2.0

//! `struct ib_device`: allocation, registration, the ops table, and references to devices.
//!
//! A device is allocated by ib_core with room for the driver's data right behind the
//! `ib_device` (the layout `ib_alloc_device()` produces in C). Once registered, ib_core owns it:
//! it may be unregistered by `rdma link delete`, by netdev removal or by module unload, and the
//! driver data is dropped in the `dealloc_driver` callback, after which the memory is freed.

use super::attrs::{DeviceAttr, DriverId, EthSpeed, PortAttr, PortImmutable};
use crate::bindings as b;
use crate::net::netdev::{NetDev, NetDevRef};
use core::{marker::PhantomData, ptr::NonNull};
use kernel::{error::from_result, prelude::*, types::Opaque};

/// What a driver implements to back an ib_device (driver code, safe Rust).
pub trait IbDriver: Send + Sync + Sized + 'static {
    /// The device attributes (`ib_query_device`).
    fn query_device(dev: &Device<Self>) -> Result<DeviceAttr>;
    /// The attributes of port `port` (1-based).
    fn query_port(dev: &Device<Self>, port: u32) -> Result<PortAttr>;
    /// The immutable properties of port `port`.
    fn port_immutable(dev: &Device<Self>, port: u32) -> Result<PortImmutable>;
    /// The net device of `port`, or `None` once it is unregistering (ib_core's `get_netdev`
    /// contract). rvrdma answers this itself instead of `ib_device_set_netdev()`, so that
    /// drivers looking devices up by netdev and driver id (rdma_rxe, which shares our driver id)
    /// never find ours and mistake them for theirs.
    fn get_netdev(dev: &Device<Self>, port: u32) -> Option<NetDevRef>;
    /// Returns entry `index` of port `port`'s P_Key table.
    fn query_pkey(dev: &Device<Self>, port: u32, index: u16) -> Result<u16>;
    /// Called once the device is allocated, its data set and the device listed in
    /// [`super::registry`], before it is registered; an error aborts the registration (and
    /// [`IbDriver::dealloc`] is called).
    fn allocated(dev: &Device<Self>) -> Result;
    /// Called once when ib_core is done with the device, before the device leaves
    /// [`super::registry`] and its data is dropped.
    fn dealloc(dev: &Device<Self>);
    /// Whether the per-device switch `sw` is on (read from sysfs).
    fn switch(dev: &Device<Self>, sw: Switch) -> bool;
    /// Turns the per-device switch `sw` on or off (written from sysfs, process context).
    fn set_switch(dev: &Device<Self>, sw: Switch, on: bool) -> Result;
}

/// The per-device switches, each a sysfs attribute of the device
/// (`/sys/class/infiniband/<dev>/<name>`, "0" or "1").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    /// `apm_bonding`: automatic alternate paths, failover and re-arm (seed 002).
    ApmBonding,
    /// `rx_spread`: a stream's bulk receive work is shared with another CPU
    /// (docs/datapath-design.md).
    RxSpread,
    /// `tx_burst`: consecutive packets of a connection leave as one UDP GSO packet
    /// (docs/datapath-design.md).
    TxBurst,
    /// `tx_paged`: a payload in pinned user memory leaves by reference to its pages, not
    /// copied (docs/datapath-design.md).
    TxPaged,
}

impl Switch {
    /// The switch with the C number `raw` (`RVR_SWITCH_*`).
    fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            b::RVR_SWITCH_APM_BONDING => Some(Self::ApmBonding),
            b::RVR_SWITCH_RX_SPREAD => Some(Self::RxSpread),
            b::RVR_SWITCH_TX_BURST => Some(Self::TxBurst),
            b::RVR_SWITCH_TX_PAGED => Some(Self::TxPaged),
            _ => None,
        }
    }
}

/// The memory layout behind an rvrdma `ib_device`: ib_core's part first, then the driver's.
#[repr(C)]
struct Alloc<T> {
    ibdev: b::ib_device,
    data: T,
}

/// A device of driver `T`, borrowed for the duration of an ib_core callback or a held reference.
///
/// # Invariants
///
/// The `ib_device` is the first field of a live `Alloc<T>` whose `data` is initialised.
#[repr(transparent)]
pub struct Device<T>(Opaque<b::ib_device>, PhantomData<T>);

impl<T: IbDriver> Device<T> {
    /// # Safety
    ///
    /// `ptr` must be the `ibdev` field of a live `Alloc<T>` with initialised data, for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut b::ib_device) -> &'a Self {
        // `Device<T>` is `repr(transparent)` over `Opaque<ib_device>`.
        // SAFETY: the cast keeps the layout; liveness is the caller's guarantee.
        unsafe { &*ptr.cast::<Self>() }
    }

    /// The raw pointer, for calls into ib_core.
    pub fn as_raw(&self) -> *mut b::ib_device {
        self.0.get()
    }

    /// The driver's data.
    pub fn data(&self) -> &T {
        let alloc = self.as_raw().cast::<Alloc<T>>();
        // By the type invariant `ibdev` is the first field of a live `Alloc<T>`.
        // SAFETY: so the cast is in bounds and `data` is initialised.
        unsafe { &(*alloc).data }
    }

    /// The device name (e.g. `rvr0`).
    pub fn name(&self) -> &CStr {
        // SAFETY: the device is live; its name lives as long as it does.
        unsafe { CStr::from_char_ptr(b::rvr_ib_device_name(self.as_raw())) }
    }

    /// The net device bound to `port`, if any.
    pub fn netdev(&self, port: u32) -> Option<NetDevRef> {
        // SAFETY: the device is live; `ib_device_get_netdev` returns a held reference or NULL.
        unsafe { NetDevRef::from_raw_owned(b::ib_device_get_netdev(self.as_raw(), port)) }
    }

    /// Keeps the device's memory alive past the current borrow (for unregistration).
    pub fn pin(&self) -> PinnedDevice {
        // SAFETY: `self` is a live device (type invariant) for the duration of this call.
        unsafe { PinnedDevice::pin(NonNull::from(&self.0).cast()) }
    }

    /// The Ethernet speed and width of `port` (`ib_get_eth_speed`), `None` when unknown.
    pub fn eth_speed(&self, port: u32) -> Option<EthSpeed> {
        let mut speed: u16 = 0;
        let mut width: u8 = 0;
        // SAFETY: the device is live (type invariant); both outputs are valid for writes.
        let ret = unsafe { b::ib_get_eth_speed(self.as_raw(), port, &mut speed, &mut width) };
        (ret == 0).then_some(EthSpeed { speed, width })
    }

    /// The device while it is registered: `None` before registration completes and once
    /// unregistration has begun.
    pub fn registered(&self) -> Option<Registered<'_, T>> {
        // INVARIANT: on success we hold one registration reference.
        // `ib_device_try_get` takes the registration reference only while it is nonzero. The
        // guard is built lazily (`then`, not `then_some`): building it when the get failed
        // would drop it, putting a reference we never took.
        // SAFETY: the device is live.
        unsafe { b::rvr_ib_device_try_get(self.as_raw()) }.then(|| Registered(self))
    }
}

/// A device of driver `T` that stays registered while this value lives.
///
/// # Invariants
///
/// The value holds one `ib_device_try_get` reference on the device.
pub struct Registered<'a, T: IbDriver>(&'a Device<T>);

impl<T: IbDriver> Registered<'_, T> {
    /// Reports `ndev`'s link state as a port event (IB_EVENT_PORT_ACTIVE / PORT_ERR), once
    /// per change.
    pub fn dispatch_port_state_event(&self, ndev: &NetDev) {
        // SAFETY: the device is registered (type invariant), so its port data exists; ib_core
        // finds the port through our `get_netdev`.
        unsafe { b::ib_dispatch_port_state_event(self.0.as_raw(), ndev.as_raw()) };
    }

    /// Queues unregistration on ib_core's workqueue (usable from a netdev notifier).
    pub fn unregister_queued(&self) {
        // SAFETY: the device is registered (type invariant); ib_core takes its own reference.
        unsafe { b::ib_unregister_device_queued(self.0.as_raw()) };
    }
}

impl<T: IbDriver> Drop for Registered<'_, T> {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we hold one registration reference.
        unsafe { b::ib_device_put(self.0.as_raw()) };
    }
}

/// Parameters of a new device.
pub struct DeviceParams<'a> {
    /// The ib device name.
    pub name: &'a CStr,
    /// Number of ports (the driver's data holds their net devices).
    pub nports: u32,
    /// The node GUID (network byte order).
    pub node_guid: u64,
    /// The ib driver id reported to user space.
    pub driver_id: DriverId,
    /// The driver's uverbs ABI version.
    pub uverbs_abi_ver: u32,
}

/// Allocates, sets up and registers a device of driver `T` with `data`.
///
/// On success ib_core owns the device; it reports back through [`IbDriver`] callbacks and
/// drops `data` in `dealloc_driver`.
pub fn register<T: super::verbs::Verbs>(
    module: &'static ThisModule,
    p: &DeviceParams<'_>,
    data: T,
) -> Result {
    let nports = p.nports;
    if nports == 0 {
        return Err(EINVAL);
    }
    // SAFETY: the size covers `Alloc<T>`, which starts with the
    // `ib_device` (the `ib_alloc_device()` layout). kmalloc's alignment covers `T` (checked below).
    let raw = unsafe { b::rvr_ib_alloc_device(size_of::<Alloc<T>>()) };
    let raw = NonNull::new(raw).ok_or(ENOMEM)?.as_ptr();
    const { assert!(align_of::<Alloc<T>>() <= 8) };
    // SAFETY: `raw` is a fresh, zeroed allocation of `Alloc<T>` size; write the data in place
    // before any callback (in particular `dealloc_driver`) can observe it.
    unsafe { core::ptr::addr_of_mut!((*raw.cast::<Alloc<T>>()).data).write(data) };
    // INVARIANT: from here on `raw` is an `Alloc<T>` with initialised data.

    // SAFETY: `raw` is a live, not yet registered device we own exclusively.
    unsafe {
        let d = &mut *raw;
        d.node_type = b::RDMA_NODE_IB_CA as u8;
        d.phys_port_cnt = nports;
        d.num_comp_vectors = 1;
        d.local_dma_lkey = 0;
        d.node_guid = p.node_guid;
        let desc = b"rvrdma\0";
        for (i, c) in desc.iter().enumerate() {
            d.node_desc[i] = *c;
        }
        d.uverbs_cmd_mask |= (1u64 << b::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_POST_SEND)
            | (1u64 << b::ib_uverbs_write_cmds_IB_USER_VERBS_CMD_REQ_NOTIFY_CQ);
        let mut ops = Ops::<T>::TABLE;
        super::verbs::install::<T>(&mut ops);
        ops.owner = module.as_ptr();
        ops.driver_id = p.driver_id.to_raw();
        ops.uverbs_abi_ver = p.uverbs_abi_ver;
        ops.device_group = &raw const b::rvr_dev_attr_group;
        // One driver type per module: every device's switches go to `T`.
        b::rvr_sysfs_set_switch_ops(Some(Ops::<T>::switch_get), Some(Ops::<T>::switch_set));
        b::ib_set_device_ops(raw, &ops);
    }

    let result = (|| {
        // SAFETY: the data is initialised and the ops set (INVARIANT above).
        let dev = unsafe { Device::<T>::from_raw(raw) };
        super::registry::add(dev)?;
        T::allocated(dev)?;
        // SAFETY: `raw` is fully set up; the name is NUL-terminated. With no DMA device,
        // ib_core uses the ib device itself (rvrdma moves data with the CPU).
        match unsafe { b::ib_register_device(raw, p.name.as_char_ptr(), core::ptr::null_mut()) } {
            // ib_core reports a taken name as ENFILE; say what it means.
            e if e == -(b::ENFILE as c_int) => Err(EEXIST),
            e => kernel::error::to_result(e),
        }
    })();
    if let Err(e) = result {
        // SAFETY: registration failed, so we still own `raw`; this calls `dealloc_driver`
        // (dropping the data) and frees it.
        unsafe { b::ib_dealloc_device(raw) };
        return Err(e);
    }
    Ok(())
}

/// A counted reference to some ib device (`ib_device_put` on drop).
///
/// # Invariants
///
/// The pointer is to a live device on which this value holds one `ib_device_get` reference.
pub struct IbDeviceRef(NonNull<b::ib_device>);

impl IbDeviceRef {
    /// The registered device bound to `ndev`, of any driver.
    pub fn by_netdev(ndev: &NetDev) -> Option<Self> {
        // SAFETY: `ndev` is live; the result carries a reference or is NULL.
        let p = unsafe {
            b::ib_device_get_by_netdev(ndev.as_raw(), b::rdma_driver_id_RDMA_DRIVER_UNKNOWN)
        };
        // INVARIANT: `ib_device_get_by_netdev` returned a held reference.
        NonNull::new(p).map(Self)
    }
}

impl Drop for IbDeviceRef {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we hold one reference.
        unsafe { b::ib_device_put(self.0.as_ptr()) };
    }
}

/// A device whose memory is kept alive by a kobject reference (`put_device` on drop).
///
/// # Invariants
///
/// The value holds one `get_device` reference on the device's embedded `struct device`.
pub struct PinnedDevice(NonNull<b::ib_device>);

impl PinnedDevice {
    /// Pins the memory of the device `dev`.
    ///
    /// # Safety
    ///
    /// `dev` must be a live `ib_device` for the duration of the call.
    pub(super) unsafe fn pin(dev: NonNull<b::ib_device>) -> Self {
        // SAFETY: `dev` is live (the caller's guarantee); `get_device` takes a kobject reference
        // that keeps its memory allocated until `put_device`.
        unsafe { b::rvr_ib_device_pin(dev.as_ptr()) };
        // INVARIANT: we hold a kobject reference.
        Self(dev)
    }

    /// The device's raw pointer, compared as an identity only.
    pub(super) fn as_raw(&self) -> *mut b::ib_device {
        self.0.as_ptr()
    }

    /// Unregisters the device and waits until ib_core is done with it (no-op when it is
    /// already unregistered).
    pub fn unregister(&self) {
        // SAFETY: the memory is live by the type invariant; `ib_unregister_device` tolerates
        // concurrent and repeated unregistration.
        unsafe { b::ib_unregister_device(self.0.as_ptr()) };
    }
}

impl Drop for PinnedDevice {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we hold one reference.
        unsafe { b::rvr_ib_device_unpin(self.0.as_ptr()) };
    }
}

/// The length of the array behind `p`, read from its type (the pointer is not dereferenced).
const fn array_len<E, const N: usize>(_p: *mut [E; N]) -> usize {
    N
}

/// The ops table of driver `T` and its C trampolines.
struct Ops<T>(PhantomData<T>);

impl<T: IbDriver> Ops<T> {
    const TABLE: b::ib_device_ops = b::ib_device_ops {
        query_device: Some(Self::query_device),
        query_port: Some(Self::query_port),
        get_port_immutable: Some(Self::get_port_immutable),
        query_pkey: Some(Self::query_pkey),
        get_link_layer: Some(Self::get_link_layer),
        get_netdev: Some(Self::get_netdev),
        modify_device: Some(Self::modify_device),
        alloc_ucontext: Some(Self::alloc_ucontext),
        dealloc_ucontext: Some(Self::dealloc_ucontext),
        // With this op, removing the device (`rdma link delete`, the netdev going, rmmod)
        // destroys the objects of processes that still hold it, zaps their mappings and sends
        // them IB_EVENT_DEVICE_FATAL, instead of waiting until they exit; and uverbs holds no
        // module reference for an open context.
        disassociate_ucontext: Some(Self::disassociate_ucontext),
        dealloc_driver: Some(Self::dealloc_driver),
        size_ib_ucontext: size_of::<b::ib_ucontext>(),
        // SAFETY: all-zero is a valid `ib_device_ops` (no ops, no owner).
        ..unsafe { core::mem::zeroed() }
    };

    /// # Safety
    ///
    /// ib_core callback: `ibdev` is one of ours, `attr` is valid for writes.
    unsafe extern "C" fn query_device(
        ibdev: *mut b::ib_device,
        attr: *mut b::ib_device_attr,
        udata: *mut b::ib_udata,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `udata` is NULL or valid per the callback contract.
            kernel::error::to_result(unsafe { b::rvr_ib_is_udata_in_empty(udata) })?;
            // SAFETY: `ibdev` is ours and live.
            let a = T::query_device(unsafe { Device::from_raw(ibdev) })?;
            // SAFETY: `attr` is valid for writes and exclusively ours for the call.
            a.write_to(unsafe { &mut *attr });
            // SAFETY: as above.
            kernel::error::to_result(unsafe { b::rvr_ib_respond_empty_udata(udata) })?;
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// ib_core callback: `ibdev` is one of ours, `attr` is valid for writes.
    unsafe extern "C" fn query_port(
        ibdev: *mut b::ib_device,
        port: u32,
        attr: *mut b::ib_port_attr,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `ibdev` is ours and live.
            let a = T::query_port(unsafe { Device::from_raw(ibdev) }, port)?;
            // SAFETY: `attr` is valid for writes and exclusively ours for the call.
            a.write_to(unsafe { &mut *attr });
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// ib_core callback: `ibdev` is one of ours, `imm` is valid for writes.
    unsafe extern "C" fn get_port_immutable(
        ibdev: *mut b::ib_device,
        port: u32,
        imm: *mut b::ib_port_immutable,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `ibdev` is ours and live.
            let i = T::port_immutable(unsafe { Device::from_raw(ibdev) }, port)?;
            // SAFETY: `imm` is valid for writes and exclusively ours for the call.
            i.write_to(unsafe { &mut *imm });
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// ib_core callback: `ibdev` is one of ours, `pkey` is valid for writes.
    unsafe extern "C" fn query_pkey(
        ibdev: *mut b::ib_device,
        port: u32,
        index: u16,
        pkey: *mut u16,
    ) -> c_int {
        from_result(|| {
            // SAFETY: `ibdev` is ours and live.
            let v = T::query_pkey(unsafe { Device::from_raw(ibdev) }, port, index)?;
            // SAFETY: `pkey` is valid for writes.
            unsafe { pkey.write(v) };
            Ok(0)
        })
    }

    /// `ib_modify_device`: the node description (written to sysfs `node_desc`), as rdma_rxe
    /// takes it: the 64 bytes as given, not NUL-terminated when full. The system image GUID is
    /// the port's EUI-64 and stays (`EOPNOTSUPP`), as every other flag.
    ///
    /// # Safety
    ///
    /// ib_core callback: `ibdev` is one of ours, `attr` is valid for reads.
    unsafe extern "C" fn modify_device(
        ibdev: *mut b::ib_device,
        mask: c_int,
        attr: *mut b::ib_device_modify,
    ) -> c_int {
        let node_desc = b::ib_device_modify_flags_IB_DEVICE_MODIFY_NODE_DESC;
        if mask as u32 & !node_desc != 0 {
            return crate::errno::eopnotsupp().to_errno();
        }
        if mask as u32 & node_desc == 0 {
            return 0;
        }
        // SAFETY: `attr` is valid for reads for the call.
        let desc = unsafe { (*attr).node_desc };
        // SAFETY: `ibdev` is live; only the field's address is taken.
        let dst = unsafe { core::ptr::addr_of_mut!((*ibdev).node_desc) };
        for (i, c) in desc.iter().take(array_len(dst)).enumerate() {
            // SAFETY: `i` is inside `node_desc`. ib_core reads the field without a lock (sysfs
            // `node_desc`, bounded to its length), as it does for every driver: a reader racing
            // a writer sees a mix of the two texts, never bytes outside the field.
            unsafe { dst.cast::<u8>().add(i).write_volatile(*c) };
        }
        0
    }

    /// # Safety
    ///
    /// ib_core callback: `ibdev` is one of ours. May run in atomic context.
    unsafe extern "C" fn get_netdev(ibdev: *mut b::ib_device, port: u32) -> *mut b::net_device {
        // SAFETY: `ibdev` is ours and live.
        T::get_netdev(unsafe { Device::from_raw(ibdev) }, port)
            .map_or(core::ptr::null_mut(), NetDevRef::into_raw)
    }

    /// # Safety
    ///
    /// ib_core callback; reads nothing.
    unsafe extern "C" fn get_link_layer(
        _ibdev: *mut b::ib_device,
        _port: u32,
    ) -> b::rdma_link_layer {
        // Every rvrdma port is RoCE: Ethernet underneath.
        b::rdma_link_layer_IB_LINK_LAYER_ETHERNET
    }

    /// # Safety
    ///
    /// ib_core callback with a context it allocated.
    unsafe extern "C" fn alloc_ucontext(
        _uc: *mut b::ib_ucontext,
        udata: *mut b::ib_udata,
    ) -> c_int {
        // The rxe ABI carries no driver data in GET_CONTEXT; an empty response is all it needs.
        // SAFETY: `udata` is valid per the callback contract.
        unsafe { b::rvr_ib_is_udata_in_empty(udata) }
    }

    /// # Safety
    ///
    /// ib_core callback; the context holds nothing of ours.
    unsafe extern "C" fn dealloc_ucontext(_uc: *mut b::ib_ucontext) {}

    /// # Safety
    ///
    /// ib_core callback during device removal. By then uverbs has destroyed every object of
    /// the context (through the verbs above) and zapped its mappings: nothing of ours refers to
    /// the process any more, so there is nothing left to cut.
    unsafe extern "C" fn disassociate_ucontext(_uc: *mut b::ib_ucontext) {}

    /// # Safety
    ///
    /// sysfs callback of one of our registered devices: `ibdev` is live with initialised data.
    unsafe extern "C" fn switch_get(ibdev: *mut b::ib_device, sw: c_uint) -> c_int {
        let Some(sw) = Switch::from_raw(sw) else {
            return EINVAL.to_errno();
        };
        // SAFETY: `ibdev` is ours and live (the caller's guarantee).
        c_int::from(T::switch(unsafe { Device::from_raw(ibdev) }, sw))
    }

    /// # Safety
    ///
    /// sysfs callback of one of our registered devices: `ibdev` is live with initialised data.
    unsafe extern "C" fn switch_set(ibdev: *mut b::ib_device, sw: c_uint, on: bool) -> c_int {
        from_result(|| {
            let sw = Switch::from_raw(sw).ok_or(EINVAL)?;
            // SAFETY: `ibdev` is ours and live (the caller's guarantee).
            T::set_switch(unsafe { Device::from_raw(ibdev) }, sw, on)?;
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// ib_core callback, called once per device after its last use.
    unsafe extern "C" fn dealloc_driver(ibdev: *mut b::ib_device) {
        // SAFETY: `ibdev` is ours with initialised data (set before the ops).
        let dev = unsafe { Device::<T>::from_raw(ibdev) };
        T::dealloc(dev);
        super::registry::remove(dev);
        // SAFETY: the data is initialised and ib_core never calls us again for this device;
        // it frees the memory after we return.
        unsafe {
            core::ptr::drop_in_place(core::ptr::addr_of_mut!((*ibdev.cast::<Alloc<T>>()).data))
        };
    }
}
