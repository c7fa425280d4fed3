//! How a NUMA node is named in every output. The page programs file a page whose node they could
//! not tell (its memory block unknown to the agent's table and its flags' node unreadable) under
//! `NODE_UNKNOWN`, a slot no node has: it is shown as "unknown", never as a number.
use tierscope_common::maps::NODE_UNKNOWN;

/// Whether `node` is the slot of pages whose node was not known.
pub fn is_unknown(node: u32) -> bool {
    node == NODE_UNKNOWN
}

/// The node as a key or a label: its number, or "unknown".
pub fn label(node: u32) -> String {
    if is_unknown(node) {
        "unknown".to_string()
    } else {
        node.to_string()
    }
}

/// The node in a sentence: "node 2", or "an unknown node".
pub fn text(node: u32) -> String {
    if is_unknown(node) {
        "an unknown node".to_string()
    } else {
        format!("node {node}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unknown_slot_is_never_shown_as_a_number() {
        assert_eq!((label(0), label(2), text(2)), ("0".to_string(), "2".to_string(), "node 2".to_string()));
        assert_eq!(label(NODE_UNKNOWN), "unknown");
        assert_eq!(text(NODE_UNKNOWN), "an unknown node");
        assert!(!label(NODE_UNKNOWN).contains(&NODE_UNKNOWN.to_string()));
    }
}
