//! The scripting engine of one simulated master: Lua 5.1 as embedded in Redis 7.0, running the
//! library's real scripts with Redis's `redis.*` API, its global protection, its error texts and
//! its value conversions ([`convert`]).
//!
//! Scripts are compiled as Redis 7.0 compiles them (the body as a chunk named `@user_script`),
//! so line numbers and syntax errors read the same. Libraries: base, `table`, `string`, `math`
//! (with Redis's deterministic `math.random`, [`rand48`]); not `cjson`, `struct`, `cmsgpack` or
//! `bit`, which no script of the library uses.

pub mod convert;
pub mod rand48;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;

use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use crate::frame::Frame;
use rand48::Rand48;

/// The glue between Redis's `redis` table and the engine, in a chunk of its own (`=sim`) that
/// error positions skip. `redis.call` and `redis.pcall` are Rust functions, as they are C in
/// Redis: a script's `return redis.call(...)` then keeps its frame (Lua 5.1 drops the frame of
/// a tail call to a Lua function), so a failure still names the script's line. They are set
/// into the `redis` table (the chunk's second result) for the length of each script run, since
/// they borrow the master's data; between runs they are absent.
const GLUE: &str = r#"
local G, sim, error, rawget, setmetatable, tostring = ...
local function readonly(t)
    return setmetatable({}, {
        __index = t,
        __newindex = function() error("Attempt to modify a readonly table", 2) end,
        __metatable = false,
    })
end
local redis = {}
redis.sha1hex = function(s) return sim.sha1hex(s) end
redis.status_reply = function(s) return {ok = s} end
redis.error_reply = function(s) return {err = sim.error_text(s)} end
redis.log = function() end
redis.replicate_commands = function() return true end
redis.set_repl = function() end
redis.setresp = function() error("redis.setresp is not simulated", 2) end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL =
    0, 1, 2, 2, 3
G.redis = readonly(redis)
G.math.random = sim.random
G.math.randomseed = sim.randomseed
for _, lib in ipairs({"string", "table", "math"}) do G[lib] = readonly(G[lib]) end
local env = setmetatable({}, {
    __index = function(_, name)
        local v = rawget(G, name)
        if v == nil then
            error("Script attempted to access nonexistent global variable '" .. tostring(name)
                .. "'", 2)
        end
        return v
    end,
    __newindex = function() error("Attempt to modify a readonly table", 2) end,
    __metatable = false,
})
return env, redis
"#;

/// One master's Lua state and script cache.
pub struct Engine {
    lua: Lua,
    globals: Table,
    redis: Table,
    env: Table,
    handler: Function,
    xpcall: Function,
    cache: BTreeMap<String, Function>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("scripts", &self.cache.len())
            .finish_non_exhaustive()
    }
}

/// The SHA1 of `bytes` in lowercase hex, as `EVALSHA` and `redis.sha1hex` use it.
pub fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

impl Engine {
    /// A fresh Lua state with Redis's libraries and protections.
    ///
    /// # Errors
    ///
    /// Only if Lua cannot allocate.
    pub fn new() -> mlua::Result<Self> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::default(),
        )?;
        let globals = lua.globals();
        let xpcall: Function = globals.get("xpcall")?;
        for removed in [
            "dofile",
            "loadfile",
            "print",
            "collectgarbage",
            "module",
            "require",
        ] {
            globals.raw_set(removed, Value::Nil)?;
        }
        let rand = Rc::new(Cell::new(Rand48::unseeded()));
        let sim = lua.create_table()?;
        sim.raw_set(
            "sha1hex",
            lua.create_function(|_, s: mlua::String| Ok(sha1_hex(&s.as_bytes())))?,
        )?;
        sim.raw_set(
            "error_text",
            lua.create_function(|_, s: mlua::String| {
                Ok(convert::error_text(&s.to_string_lossy()))
            })?,
        )?;
        let r = Rc::clone(&rand);
        sim.raw_set(
            "random",
            lua.create_function(move |_, args: MultiValue| random(&r, &args))?,
        )?;
        let r = Rc::clone(&rand);
        sim.raw_set(
            "randomseed",
            lua.create_function(move |_, seed: f64| {
                // luaL_checkint: the number converted to a C int.
                r.set(Rand48::seeded(convert::truncate(seed) as i32));
                Ok(())
            })?,
        )?;
        let (env, redis): (Table, Table) = lua.load(GLUE).set_name("=sim").call((
            globals.clone(),
            sim.clone(),
            globals.get::<Function>("error")?,
            globals.get::<Function>("rawget")?,
            globals.get::<Function>("setmetatable")?,
            globals.get::<Function>("tostring")?,
        ))?;
        let handler = lua.create_function(error_handler)?;
        Ok(Self {
            lua,
            globals,
            redis,
            env,
            handler,
            xpcall,
            cache: BTreeMap::new(),
        })
    }

    /// Compiles `body` and caches it under its SHA1 (`SCRIPT LOAD`, and `EVAL`'s first step).
    ///
    /// # Errors
    ///
    /// The error reply of a script that does not compile, as Redis words it.
    pub fn load(&mut self, body: &[u8]) -> Result<String, Frame> {
        let sha = sha1_hex(body);
        if self.cache.contains_key(&sha) {
            return Ok(sha);
        }
        let compiled = self
            .lua
            .load(body)
            .set_name("@user_script")
            .set_environment(self.env.clone())
            .into_function();
        match compiled {
            Ok(function) => {
                self.cache.insert(sha.clone(), function);
                Ok(sha)
            }
            Err(mlua::Error::SyntaxError { message, .. }) => Err(Frame::error(format!(
                "ERR Error compiling script (new function): {message}"
            ))),
            Err(other) => Err(Frame::error(format!(
                "ERR Error compiling script (new function): {other}"
            ))),
        }
    }

    /// Whether a script with this SHA1 is cached.
    pub fn has(&self, sha: &str) -> bool {
        self.cache.contains_key(&sha.to_ascii_lowercase())
    }

    /// Forgets every script (`SCRIPT FLUSH`; a restart starts a new engine).
    pub fn flush(&mut self) {
        self.cache.clear();
    }

    /// Runs the cached script `sha` with `keys` and `argv`; its commands go to `exec`, which
    /// answers each as the master would (script-context errors included).
    ///
    /// Returns the script's reply: `NOSCRIPT` if it is not cached, an error reply if it failed.
    pub fn run(
        &mut self,
        sha: &str,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        exec: &mut dyn FnMut(&[Vec<u8>]) -> Frame,
    ) -> Frame {
        let sha = sha.to_ascii_lowercase();
        let Some(function) = self.cache.get(&sha).cloned() else {
            return Frame::error("NOSCRIPT No matching script. Please use EVAL.");
        };
        match self.run_function(&sha, &function, keys, argv, exec) {
            Ok(frame) => frame,
            // Only when Lua itself fails (out of memory): no script can cause it.
            Err(e) => Frame::error(format!("ERR simulated Lua failed: {e}")),
        }
    }

    fn run_function(
        &self,
        sha: &str,
        function: &Function,
        keys: &[Vec<u8>],
        argv: &[Vec<u8>],
        exec: &mut dyn FnMut(&[Vec<u8>]) -> Frame,
    ) -> mlua::Result<Frame> {
        let lua = &self.lua;
        self.globals.raw_set("KEYS", strings(lua, keys)?)?;
        self.globals.raw_set("ARGV", strings(lua, argv)?)?;
        let exec = std::cell::RefCell::new(exec);
        let reply = lua.scope(|scope| {
            // One function per kind, each a single hop from Lua into the master.
            for (name, raise) in [("call", true), ("pcall", false)] {
                let exec = &exec;
                let function = scope.create_function(move |lua, args: MultiValue| {
                    let reply = match command_args(&args) {
                        Ok(args) => (exec.borrow_mut())(&args),
                        Err(text) => Frame::error(text),
                    };
                    match reply {
                        Frame::Error(text) if raise => {
                            Err(mlua::Error::external(Raised(convert::error_text(&text))))
                        }
                        Frame::Error(text) => Ok(Value::Table(convert::error_table(lua, &text)?)),
                        other => convert::to_lua(lua, &other),
                    }
                })?;
                self.redis.raw_set(name, function)?;
            }
            let out = self
                .xpcall
                .call::<MultiValue>((function.clone(), self.handler.clone()));
            self.redis.raw_set("call", Value::Nil)?;
            self.redis.raw_set("pcall", Value::Nil)?;
            let mut out = out?.into_iter();
            let ok = matches!(out.next(), Some(Value::Boolean(true)));
            let value = out.next().unwrap_or(Value::Nil);
            if ok {
                return convert::to_frame(&value);
            }
            Ok(failure(sha, &value))
        });
        self.globals.raw_set("KEYS", Value::Nil)?;
        self.globals.raw_set("ARGV", Value::Nil)?;
        reply
    }
}

/// The reply of a script that raised `error` (the table [`error_handler`] made of it).
fn failure(sha: &str, error: &Value) -> Frame {
    let Value::Table(t) = error else {
        return Frame::error(format!("ERR Error running script {sha}, execution failure"));
    };
    let text = |field: &str| match t.raw_get::<Value>(field) {
        Ok(Value::String(s)) => Some(s.to_string_lossy()),
        Ok(Value::Number(n)) => Some(convert::truncate(n).to_string()),
        Ok(Value::Integer(n)) => Some(n.to_string()),
        _ => None,
    };
    let message = text("err").unwrap_or_else(|| "ERR unknown error".into());
    match (text("source"), text("line")) {
        (Some(source), Some(line)) => {
            Frame::error(format!("{message} script: {sha}, on {source}:{line}."))
        }
        _ => Frame::error(message),
    }
}

/// Redis's `__redis__err__handler`: turns any error into `{err, source, line}`, the position
/// being the script's line that raised it (skipping C functions and the glue, which stand for
/// Redis's C functions).
fn error_handler(lua: &Lua, error: Value) -> mlua::Result<Table> {
    let table = match error {
        Value::Table(t) => t,
        Value::Error(e) => {
            let text = match e.chain().find_map(|c| c.downcast_ref::<Raised>()) {
                Some(Raised(text)) => text.clone(),
                None => format!("ERR {e}"),
            };
            let t = lua.create_table()?;
            t.raw_set("err", text)?;
            t
        }
        other => {
            let text = match &other {
                Value::String(s) => s.to_string_lossy(),
                Value::Nil => "nil".into(),
                Value::Boolean(b) => b.to_string(),
                Value::Integer(n) => n.to_string(),
                Value::Number(n) => convert::number_argument(*n),
                v => v.type_name().to_owned(),
            };
            let t = lua.create_table()?;
            t.raw_set("err", format!("ERR {text}"))?;
            t
        }
    };
    for level in 1..16 {
        let frame = lua.inspect_stack(level, |debug| {
            let source = debug.source();
            let name = source.source.map(|s| s.into_owned()).unwrap_or_default();
            (source.what, name, debug.current_line())
        });
        let Some((what, source, line)) = frame else {
            break;
        };
        if what == "C" || source == "=sim" {
            continue;
        }
        table.raw_set("source", source)?;
        if let Some(line) = line {
            table.raw_set("line", line)?;
        }
        break;
    }
    Ok(table)
}

/// The error a failed `redis.call` raises: its `{err = ...}` text.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// `math.random([m [, n]])` on Redis's generator.
fn random(rand: &Cell<Rand48>, args: &MultiValue) -> mlua::Result<f64> {
    let mut r = rand.get();
    let unit = r.unit();
    rand.set(r);
    let int = |v: &Value| match v {
        Value::Integer(n) => Ok(*n as f64),
        Value::Number(n) => Ok(n.trunc()),
        _ => Err(mlua::Error::runtime(
            "bad argument to 'random' (number expected)",
        )),
    };
    match args.len() {
        0 => Ok(unit),
        1 => {
            let u = int(&args[0])?;
            if u < 1.0 {
                return Err(mlua::Error::runtime(
                    "bad argument #1 to 'random' (interval is empty)",
                ));
            }
            Ok((unit * u).floor() + 1.0)
        }
        2 => {
            let (l, u) = (int(&args[0])?, int(&args[1])?);
            if l > u {
                return Err(mlua::Error::runtime(
                    "bad argument #2 to 'random' (interval is empty)",
                ));
            }
            Ok((unit * (u - l + 1.0)).floor() + l)
        }
        _ => Err(mlua::Error::runtime("wrong number of arguments")),
    }
}

/// A Lua array of byte strings.
fn strings(lua: &Lua, items: &[Vec<u8>]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        t.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(t)
}

/// The arguments of a `redis.call`, as Redis takes them: strings as they are, numbers as
/// `%.17g`, anything else refused.
fn command_args(args: &MultiValue) -> Result<Vec<Vec<u8>>, &'static str> {
    if args.is_empty() {
        return Err("ERR Please specify at least one argument for this redis lib call");
    }
    args.iter()
        .map(|arg| match arg {
            Value::String(s) => Ok(s.as_bytes().to_vec()),
            Value::Integer(n) => Ok(convert::number_argument(*n as f64).into_bytes()),
            Value::Number(n) => Ok(convert::number_argument(*n).into_bytes()),
            _ => Err("ERR Lua redis lib command arguments must be strings or integers"),
        })
        .collect()
}

#[cfg(test)]
mod tests;
