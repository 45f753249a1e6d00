// SPDX-License-Identifier: GPL-2.0

//! The routes of a QP's paths. A route lookup may enable BH, so none runs under the QP lock:
//! Modify QP looks the new paths up before its transition, and a packet that finds no valid
//! route asks the work item (process context, no lock) for a lookup ([`QpOut::need_route`]);
//! meanwhile a stale route still carries packets.
//!
//! [`QpOut::need_route`]: super::outputs::QpOut::need_route

use super::{transmit, QpShared};
use crate::net::tx::Route;
use crate::rvcore::apm::PathInfo;
use kernel::prelude::*;

/// What a QP keeps about its paths.
#[derive(Default)]
pub(crate) struct QpPaths {
    /// Destination MACs by port (Modify QP's, for Query QP): a migration swaps the paths, and
    /// each path is on its own port.
    pub(crate) dmac: [[u8; 6]; 2],
    /// Routes of the paths in use.
    pub(crate) routes: RouteCache,
    /// A route lookup is due (done by the work item, in process context).
    pub(crate) need_route: bool,
}

impl QpPaths {
    /// The `dmac` slot of a port number (1-based; anything else shares slot 0).
    fn dmac_slot(port: u32) -> usize {
        usize::from(port == 2)
    }

    /// The destination MAC Modify QP gave for the path on `port`.
    pub(crate) fn dmac(&self, port: u32) -> [u8; 6] {
        self.dmac[Self::dmac_slot(port)]
    }

    /// Records the destination MAC of the path on `port`.
    pub(crate) fn set_dmac(&mut self, port: u32, mac: [u8; 6]) {
        self.dmac[Self::dmac_slot(port)] = mac;
    }
}

impl QpShared {
    /// Looks up the routes of the primary and alternate paths that have none (process context,
    /// no lock held).
    pub(super) fn refresh_routes(&self) {
        let a = self.inner.lock().core.query();
        self.look_up_routes([a.path, a.alt_path]);
    }

    /// Looks up the routes of `paths` that have none (process context, no lock held).
    pub(super) fn look_up_routes(&self, paths: [PathInfo; 2]) {
        let missing = {
            let g = self.inner.lock();
            paths.map(|p| !has_route(&g.paths.routes, &p))
        };
        let found = lookup_routes(
            self,
            |p| paths.iter().zip(missing.iter()).any(|(q, m)| q == p && !*m),
            &paths,
        );
        if !found.is_empty() {
            install_routes(&mut self.inner.lock().paths.routes, found);
        }
    }
}

/// A route kept for one path (source, destination, port).
pub(crate) struct CachedRoute {
    port: u8,
    sgid: [u8; 16],
    dgid: [u8; 16],
    route: Route,
}

/// The routes of a QP's primary and alternate paths.
pub(crate) type RouteCache = [Option<CachedRoute>; 2];

/// The route stored for `path`, valid or not.
pub(super) fn stored<'c>(cache: &'c RouteCache, path: &PathInfo) -> Option<&'c Route> {
    cache
        .iter()
        .flatten()
        .find(|c| c.port == path.port_num && c.sgid == path.sgid && c.dgid == path.dgid)
        .map(|c| &c.route)
}

fn cached<'c>(cache: &'c RouteCache, path: &PathInfo) -> Option<&'c Route> {
    stored(cache, path).filter(|r| r.is_valid())
}

fn store(cache: &mut RouteCache, path: &PathInfo, route: Route) {
    let i = cache
        .iter()
        .position(|c| c.as_ref().is_some_and(|c| c.port == path.port_num))
        .or_else(|| cache.iter().position(|c| c.is_none()))
        .unwrap_or(0);
    cache[i] = Some(CachedRoute {
        port: path.port_num,
        sgid: path.sgid,
        dgid: path.dgid,
        route,
    });
}

/// Looks up the routes of `paths` that have none cached (process context, no lock held:
/// lookups need IRQs enabled). Returns them for [`install_routes`].
fn lookup_routes(
    qp: &QpShared,
    cache_has: impl Fn(&PathInfo) -> bool,
    paths: &[PathInfo],
) -> KVec<(PathInfo, Route)> {
    let mut found = KVec::new();
    for p in paths.iter().filter(|p| p.port_num != 0 && !cache_has(p)) {
        let (Some(params), Some(tun)) = (
            transmit::tx_params(qp, p, 0),
            transmit::tunnel(qp, p.port_num),
        ) else {
            continue;
        };
        if let Ok(r) = Route::lookup(tun, &params) {
            let _ = found.push((*p, r), GFP_KERNEL);
        }
    }
    found
}

/// Whether `cache` holds a valid route for `path`.
fn has_route(cache: &RouteCache, path: &PathInfo) -> bool {
    cached(cache, path).is_some()
}

/// Stores routes found by [`lookup_routes`].
fn install_routes(cache: &mut RouteCache, found: KVec<(PathInfo, Route)>) {
    for (p, r) in found {
        store(cache, &p, r);
    }
}
