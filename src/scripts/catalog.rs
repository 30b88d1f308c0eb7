//! Every Lua script by name, read-only, for the deterministic simulation's masters (which run
//! the library's real scripts) and its conformance test against `redis-server`.

use std::sync::LazyLock;

use super::LuaScript;

/// `(name, source)` of every script the library sends, the jepsen-lite mutants' included.
#[doc(hidden)]
pub fn lua_scripts() -> &'static [(&'static str, &'static str)] {
    static CATALOG: LazyLock<Vec<(&'static str, &'static str)>> = LazyLock::new(|| {
        let named: [(&str, &LuaScript); 21] = [
            ("acquire", &super::ACQUIRE),
            ("compare_and_delete", &super::COMPARE_AND_DELETE),
            ("compare_and_pexpire", &super::COMPARE_AND_PEXPIRE),
            ("extend_with_companion", &super::EXTEND_WITH_COMPANION),
            ("raise_fence", &super::RAISE_FENCE),
            ("release_reentrant", &super::RELEASE_REENTRANT),
            ("extend_reentrant", &super::EXTEND_REENTRANT),
            ("release_holding", &super::RELEASE_HOLDING),
            ("master_life", &super::MASTER_LIFE),
            ("provision", &super::PROVISION),
            ("multi_acquire", &super::MULTI_ACQUIRE),
            ("multi_release", &super::MULTI_RELEASE),
            ("multi_extend", &super::MULTI_EXTEND),
            ("multi_raise_fence", &super::MULTI_RAISE_FENCE),
            ("announce", &super::ANNOUNCE),
            ("slot_status", &super::SLOT_STATUS),
            ("claim_slots", &super::CLAIM_SLOTS),
            ("revert_slots", &super::REVERT_SLOTS),
            ("finish_slots", &super::FINISH_SLOTS),
            ("plain_delete", &super::PLAIN_DELETE),
            ("extend_recreates", &super::EXTEND_RECREATES),
        ];
        named.map(|(name, script)| (name, script.source)).to_vec()
    });
    &CATALOG
}

#[cfg(test)]
mod tests {
    /// The catalog names every script the library loads on a connection.
    #[test]
    fn every_loaded_script_is_in_the_catalog() {
        let sources: Vec<&str> = super::lua_scripts().iter().map(|(_, s)| *s).collect();
        for script in super::super::all() {
            assert!(sources.contains(&script.source));
        }
    }
}
