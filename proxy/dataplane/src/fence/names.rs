//! A run's names in the fence pool: each name airlock's DNS answers gets one address of
//! 198.18.0.0/15 for the life of the run, and the address maps back to the name.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use airlock_net::fence::{POOL_BASE, POOL_PREFIX};

/// Most names one run may resolve (a run past it gets `REFUSED`).
pub const MAX_NAMES_PER_RUN: usize = 65_536;

/// The first address handed out: `.0` is the network and `.1` the fence's own.
const FIRST_OFFSET: u32 = 2;

/// One run's name ↔ address table.
#[derive(Debug, Default)]
pub(crate) struct Names {
    by_name: HashMap<String, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, String>,
}

impl Names {
    /// The address of `name` (lower case, no trailing dot), allocated on first use;
    /// `None` when the run already holds [`MAX_NAMES_PER_RUN`] names.
    pub(crate) fn address(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(addr) = self.by_name.get(name) {
            return Some(*addr);
        }
        let size = 1u32 << (32 - POOL_PREFIX);
        let offset = FIRST_OFFSET + self.by_name.len() as u32;
        if self.by_name.len() >= MAX_NAMES_PER_RUN || offset >= size {
            return None;
        }
        let addr = Ipv4Addr::from(u32::from(POOL_BASE) + offset);
        self.by_name.insert(name.to_owned(), addr);
        self.by_addr.insert(addr, name.to_owned());
        Some(addr)
    }

    /// The name an address was given for, if airlock's DNS gave it.
    pub(crate) fn name(&self, addr: Ipv4Addr) -> Option<&str> {
        self.by_addr.get(&addr).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_keeps_one_address_that_maps_back() {
        let mut names = Names::default();
        let a = names.address("a.test").expect("a");
        let b = names.address("b.test").expect("b");
        assert_eq!(a, Ipv4Addr::new(198, 18, 0, 2));
        assert_eq!(b, Ipv4Addr::new(198, 18, 0, 3));
        assert_eq!(names.address("a.test"), Some(a));
        assert_eq!(names.name(b), Some("b.test"));
        assert_eq!(names.name(Ipv4Addr::new(198, 18, 0, 9)), None);
    }
}
