// SPDX-License-Identifier: GPL-2.0

//! The routes of a QP's paths. A route lookup may enable BH, so none runs under the QP lock:
//! Modify QP looks the new paths up before its transition, and a packet that finds no valid
//! route asks the work item (process context, no lock) for a lookup ([`QpOut::need_route`]), as
//! does a port that comes up for the paths through it; meanwhile a stale route still carries
//! packets.
//!
//! [`QpOut::need_route`]: super::outputs::QpOut::need_route

use super::{transmit, QpShared};
use crate::net::tx::Route;
use crate::rvcore::apm::PathInfo;
use kernel::prelude::*;

/// Routes a QP keeps: the primary and alternate paths of a connected QP, recent destinations
/// of a datagram QP.
const ROUTES: usize = 8;
/// Destinations a datagram QP waits to have looked up.
const WANTED: usize = 4;

/// Datagram destinations gathered where the QP's paths are borrowed (a kernel post), to ask
/// for with [`QpPaths::want`] afterwards.
#[derive(Default)]
pub(crate) struct Wanted(pub(crate) [Option<PathInfo>; WANTED]);

impl Wanted {
    /// Adds `path` unless listed (when full, the first entry gives way, as in `want`).
    pub(crate) fn add(&mut self, path: &PathInfo) {
        if self.0.iter().flatten().any(|p| p == path) {
            return;
        }
        let i = self.0.iter().position(|p| p.is_none()).unwrap_or(0);
        self.0[i] = Some(*path);
    }
}

/// What a QP keeps about its paths.
#[derive(Default)]
pub(crate) struct QpPaths {
    /// Destination MACs by port (Modify QP's, for Query QP): a migration swaps the paths, and
    /// each path is on its own port.
    pub(crate) dmac: [[u8; 6]; 2],
    /// Routes of the paths in use.
    pub(crate) routes: RouteCache,
    /// A lookup of the primary and alternate paths' routes is due (done by the work item, in
    /// process context).
    pub(crate) need_route: bool,
    /// Datagram destinations without a route, to look up with the next lookup.
    wanted: Wanted,
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

    /// Asks for the route of datagram destination `path` unless one is cached (the oldest
    /// wish gives way when the list is full).
    pub(crate) fn want(&mut self, path: &PathInfo) {
        if !has_route(&self.routes, path) {
            self.wanted.add(path);
        }
    }

    /// Whether a valid route to `path` is cached.
    pub(crate) fn has_route(&self, path: &PathInfo) -> bool {
        has_route(&self.routes, path)
    }

    /// Whether the work item has routes to look up.
    pub(crate) fn lookup_due(&self) -> bool {
        self.need_route || self.wanted.0.iter().any(|p| p.is_some())
    }
}

impl QpShared {
    /// Looks up the routes of the primary and alternate paths and of the wanted datagram
    /// destinations that have none (process context, no lock held).
    pub(super) fn refresh_routes(&self) {
        let (a, wanted) = {
            let mut g = self.inner.lock();
            g.paths.need_route = false;
            (g.core.query(), core::mem::take(&mut g.paths.wanted).0)
        };
        let mut paths = [PathInfo::EMPTY; 2 + WANTED];
        paths[0] = a.path;
        paths[1] = a.alt_path;
        for (d, w) in paths[2..].iter_mut().zip(wanted) {
            *d = w.unwrap_or(PathInfo::EMPTY);
        }
        self.look_up_routes(&paths);
    }

    /// Looks up the routes of `paths` that have none (process context, no lock held).
    pub(super) fn look_up_routes(&self, paths: &[PathInfo]) {
        let mut missing = [false; 2 + WANTED];
        {
            let g = self.inner.lock();
            for (m, p) in missing.iter_mut().zip(paths) {
                *m = !has_route(&g.paths.routes, p);
            }
        }
        let found = lookup_routes(
            self,
            |p| paths.iter().zip(missing.iter()).any(|(q, m)| q == p && !*m),
            paths,
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

/// The routes a QP keeps ([`ROUTES`]).
pub(crate) type RouteCache = [Option<CachedRoute>; ROUTES];

/// The route stored for `path`, valid or not.
pub(super) fn stored<'c>(cache: &'c RouteCache, path: &PathInfo) -> Option<&'c Route> {
    cache
        .iter()
        .flatten()
        .find(|c| c.port == path.port_num && c.sgid == path.sgid && c.dgid == path.dgid)
        .map(|c| &c.route)
}

/// The route cached for `path`, if valid.
fn cached<'c>(cache: &'c RouteCache, path: &PathInfo) -> Option<&'c Route> {
    stored(cache, path).filter(|r| r.is_valid())
}

/// Stores `route` for `path`: over the route of the same path, else in a free slot, else over
/// one of the others (picked by the path, so that a stream of new destinations spreads).
fn store(cache: &mut RouteCache, path: &PathInfo, route: Route) {
    let same =
        |c: &CachedRoute| c.port == path.port_num && c.sgid == path.sgid && c.dgid == path.dgid;
    let i = cache
        .iter()
        .position(|c| c.as_ref().is_some_and(same))
        .or_else(|| cache.iter().position(|c| c.is_none()))
        .unwrap_or_else(|| usize::from(path.dgid[15]) % ROUTES);
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
            transmit::tx_params(qp, p, 0, None),
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
