//! Who gets a connection slot on the Prometheus endpoint ([`super::prometheus`]), pure so the
//! rules are unit tested.
//!
//! A crowd must not starve the scraper (issue 41). The scraper is a peer that completes requests:
//! it connects, sends its request at once and reads its answer. So each peer (source address)
//! holds at most [`PER_PEER`] connections, and a peer at its cap makes room among its own; when
//! all [`MAX_CONNECTIONS`] are taken, a newcomer closes an idle or slow connection of the busiest
//! peer, never one being encoded and never a peer's only connection when it is mid-request or
//! its peer was answered in the last [`RECENT`]. When every connection is protected the newcomer
//! waits for one to end (each ends within the endpoint's deadline; most in milliseconds).
use std::{
    collections::HashMap,
    net::IpAddr,
    time::{Duration, Instant},
};

/// Connections open at once. Every connection serves the same cached encoding, so an open
/// connection costs a task and a socket, not an answer of its own.
pub const MAX_CONNECTIONS: usize = 16;
/// Connections open at once from one source address. A node has a scraper or two (an HA pair of
/// Prometheus servers, each from its own address) and the kubelet's probe, each with one.
pub const PER_PEER: usize = 4;
/// How long a peer counts as a scraper after its last complete answer: longer than the
/// scrape intervals in use (15 s to 1 min).
pub const RECENT: Duration = Duration::from_secs(120);
/// Peers remembered as answered; past this the oldest is forgotten first.
pub const PEERS_REMEMBERED: usize = 1024;

/// Where an open connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Accepted; not a byte of a request yet.
    Idle,
    /// Part of a request read, waiting for the rest.
    Request,
    /// The agent gathers and encodes the answer, or waits for the encoding in progress.
    Encoding,
    /// Waiting for the peer to take the answer.
    Answer,
}

/// An open connection as the admission sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Open {
    pub peer: IpAddr,
    pub accepted: Instant,
    pub phase: Phase,
}

/// What to do with a newcomer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// A slot is free: take it.
    Take,
    /// Close this connection and take its slot.
    Evict(u64),
    /// Every connection the newcomer could close is protected: wait for one to end.
    Wait,
}

/// Where the newcomer from `peer` goes, given the connections open and whether a peer was
/// answered recently (see the module's rules). Ties go to the connection accepted first, then
/// the lower id.
pub fn admit(open: &[(u64, Open)], peer: IpAddr, recently_served: impl Fn(IpAddr) -> bool) -> Admit {
    let count = |p: IpAddr| open.iter().filter(|(_, o)| o.peer == p).count();
    let waiting_on_peer = |o: &Open| o.phase != Phase::Encoding;
    if count(peer) >= PER_PEER {
        // Room among the peer's own connections: the one that has waited longest on it.
        return open
            .iter()
            .filter(|(_, o)| o.peer == peer && waiting_on_peer(o))
            .min_by_key(|(id, o)| (o.accepted, *id))
            .map_or(Admit::Wait, |(id, _)| Admit::Evict(*id));
    }
    if open.len() < MAX_CONNECTIONS {
        return Admit::Take;
    }
    let protected = |o: &Open| count(o.peer) == 1 && (o.phase != Phase::Idle || recently_served(o.peer));
    open.iter()
        .filter(|(_, o)| waiting_on_peer(o) && !protected(o))
        .min_by_key(|(id, o)| (std::cmp::Reverse(count(o.peer)), o.accepted, *id))
        .map_or(Admit::Wait, |(id, _)| Admit::Evict(*id))
}

/// The peers answered in full, and when last; at most [`PEERS_REMEMBERED`].
#[derive(Debug, Default)]
pub struct Served {
    at: HashMap<IpAddr, Instant>,
}

impl Served {
    /// `peer` had a complete answer at `now`.
    pub fn note(&mut self, peer: IpAddr, now: Instant) {
        if self.at.len() >= PEERS_REMEMBERED && !self.at.contains_key(&peer) {
            self.at.retain(|_, t| now.saturating_duration_since(*t) < RECENT);
            if self.at.len() >= PEERS_REMEMBERED {
                if let Some(oldest) = self.at.iter().min_by_key(|(_, t)| **t).map(|(p, _)| *p) {
                    self.at.remove(&oldest);
                }
            }
        }
        self.at.insert(peer, now);
    }

    /// Whether `peer` had a complete answer within [`RECENT`] of `now`.
    pub fn recent(&self, peer: IpAddr, now: Instant) -> bool {
        self.at.get(&peer).is_some_and(|t| now.saturating_duration_since(*t) < RECENT)
    }

    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn ip(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
    }

    fn table(t0: Instant, rows: &[(u64, u8, u64, Phase)]) -> Vec<(u64, Open)> {
        rows.iter()
            .map(|&(id, peer, s, phase)| (id, Open { peer: ip(peer), accepted: t0 + Duration::from_secs(s), phase }))
            .collect()
    }

    #[test]
    fn a_free_slot_is_taken_below_both_caps() {
        let t0 = Instant::now();
        assert_eq!(admit(&[], ip(1), |_| false), Admit::Take);
        let open = table(t0, &[(1, 1, 0, Phase::Idle), (2, 1, 1, Phase::Answer), (3, 2, 0, Phase::Request)]);
        assert_eq!(admit(&open, ip(1), |_| false), Admit::Take);
    }

    #[test]
    fn a_peer_at_its_cap_makes_room_among_its_own_connections() {
        let t0 = Instant::now();
        // Peer 1 holds four: 10 is older but being encoded; 11 and 12 tie: the lower id.
        let open = table(
            t0,
            &[
                (10, 1, 0, Phase::Encoding),
                (12, 1, 2, Phase::Request),
                (11, 1, 2, Phase::Answer),
                (13, 1, 3, Phase::Idle),
                (1, 2, 0, Phase::Idle),
            ],
        );
        assert_eq!(admit(&open, ip(1), |_| true), Admit::Evict(11));
        // Another peer is not touched by peer 1's cap, and peer 2's oldest is not closed for it.
        assert_eq!(admit(&open, ip(2), |_| false), Admit::Take);
        let encoding: Vec<(u64, Open)> =
            (0..PER_PEER as u64).flat_map(|i| table(t0, &[(i, 1, i, Phase::Encoding)])).collect();
        assert_eq!(admit(&encoding, ip(1), |_| false), Admit::Wait);
    }

    /// Every slot taken: `busy` peers with three connections each, then peers with one.
    fn full(t0: Instant, busy: &[u8], single: &[(u8, Phase)]) -> Vec<(u64, Open)> {
        let mut rows = Vec::new();
        let mut id = 0;
        for &p in busy {
            for phase in [Phase::Answer, Phase::Request, Phase::Idle] {
                rows.push((id, p, 100 + id, phase));
                id += 1;
            }
        }
        for &(p, phase) in single {
            rows.push((id, p, id, phase));
            id += 1;
        }
        let open = table(t0, &rows);
        assert_eq!(open.len(), MAX_CONNECTIONS);
        open
    }

    #[test]
    fn when_every_slot_is_taken_the_busiest_peers_oldest_waiting_connection_is_closed() {
        let t0 = Instant::now();
        // Peers 1 and 2 hold three each (accepted late); ten peers hold one each (accepted early).
        let singles: Vec<(u8, Phase)> = (10..20).map(|p| (p, Phase::Idle)).collect();
        let open = full(t0, &[1, 2], &singles);
        // Peer 1's first (id 0) is the busiest peers' oldest, though the single idle ones are older.
        assert_eq!(admit(&open, ip(30), |_| false), Admit::Evict(0));
        // A busiest peer's connection being encoded is passed over.
        let mut encoding = open.clone();
        encoding[0].1.phase = Phase::Encoding;
        assert_eq!(admit(&encoding, ip(30), |_| false), Admit::Evict(1));
    }

    #[test]
    fn a_peers_only_connection_is_closed_only_when_idle_and_not_recently_answered() {
        let t0 = Instant::now();
        let phases = [Phase::Request, Phase::Answer, Phase::Encoding, Phase::Idle];
        let singles: Vec<(u8, Phase)> = (0..MAX_CONNECTIONS as u8).map(|p| (p, phases[p as usize % 4])).collect();
        let open = full(t0, &[], &singles);
        // Every peer answered recently (a scraper mid-request, the kubelet between probes): wait.
        assert_eq!(admit(&open, ip(99), |_| true), Admit::Wait);
        // Peers never answered: their idle connections go, the oldest (peer 3, id 3) first.
        assert_eq!(admit(&open, ip(99), |_| false), Admit::Evict(3));
        // Only peer 7 (idle, id 7) was never answered.
        assert_eq!(admit(&open, ip(99), |p| p != ip(7)), Admit::Evict(7));
        // Mid-request, answering or encoding: protected whether answered or not.
        let busy: Vec<(u8, Phase)> = (0..MAX_CONNECTIONS as u8).map(|p| (p, phases[p as usize % 3])).collect();
        assert_eq!(admit(&full(t0, &[], &busy), ip(99), |_| false), Admit::Wait);
    }

    #[test]
    fn served_peers_are_remembered_for_a_while_and_within_a_bound() {
        let t0 = Instant::now();
        let mut s = Served::default();
        assert!(!s.recent(ip(1), t0));
        s.note(ip(1), t0);
        assert!(s.recent(ip(1), t0 + RECENT - Duration::from_secs(1)));
        assert!(!s.recent(ip(1), t0 + RECENT));
        // A crowd of addresses: never more than the bound, the newest kept.
        for i in 0..(PEERS_REMEMBERED as u32 + 500) {
            let peer = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            s.note(peer, t0 + Duration::from_millis(u64::from(i)));
            assert!(s.len() <= PEERS_REMEMBERED);
        }
        let last = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + PEERS_REMEMBERED as u32 + 499));
        assert!(s.recent(last, t0 + Duration::from_secs(2)));
        // The first of the crowd (the oldest) was forgotten to make room.
        assert!(!s.recent(IpAddr::V4(Ipv4Addr::from(0x0a00_0000)), t0 + Duration::from_secs(2)));
    }
}
