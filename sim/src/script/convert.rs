//! Conversions between Lua values and replies, exactly as Redis 7.0 makes them (RESP2 rules,
//! which a script follows unless it calls `redis.setresp(3)`).
//!
//! * Reply → Lua (what `redis.call` returns): integer → number, bulk → string, nil → `false`,
//!   status → `{ok = text}`, error → `{err = text}` (raised by `redis.call`), array → table.
//! * Lua → reply (what a script returns): number → integer truncated towards zero, string →
//!   bulk, `true` → 1, `false` and `nil` → nil, `{err = ...}` → error, `{ok = ...}` → status,
//!   any other table → array of its items `1..` up to the first `nil`.
//! * Lua number → command argument: C's `%.17g`, so that integers are written as integers.

use mlua::{Lua, Table, Value};

use crate::frame::Frame;

/// A reply as `redis.call` hands it to the script (an error reply as its error table).
pub fn to_lua(lua: &Lua, frame: &Frame) -> mlua::Result<Value> {
    Ok(match frame {
        Frame::Status(text) => {
            let t = lua.create_table()?;
            t.raw_set("ok", lua.create_string(text)?)?;
            Value::Table(t)
        }
        Frame::Error(text) => Value::Table(error_table(lua, text)?),
        Frame::Int(n) => Value::Number(*n as f64),
        Frame::Bulk(bytes) => Value::String(lua.create_string(bytes)?),
        Frame::Nil => Value::Boolean(false),
        Frame::Array(items) | Frame::Push(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Frame::Map(pairs) => {
            let t = lua.create_table()?;
            for (i, (key, value)) in pairs.iter().enumerate() {
                t.raw_set(2 * i + 1, to_lua(lua, key)?)?;
                t.raw_set(2 * i + 2, to_lua(lua, value)?)?;
            }
            Value::Table(t)
        }
    })
}

/// The `{err = ...}` table of an error `text`, normalised as Redis's `luaPushErrorBuff` does:
/// a leading `-` is dropped, a text without a code (no space) gets `ERR`, line breaks at the
/// end are trimmed.
pub fn error_table(lua: &Lua, text: &str) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("err", error_text(text))?;
    Ok(t)
}

/// The error text `redis.error_reply(text)` and failed calls carry: `CODE message`.
pub fn error_text(text: &str) -> String {
    let text = text.strip_prefix('-').unwrap_or(text);
    let (code, message) = text.split_once(' ').unwrap_or(("ERR", text));
    format!("{code} {}", message.trim_matches(['\r', '\n']))
}

/// What a script's return value `value` becomes as a reply.
pub fn to_frame(value: &Value) -> mlua::Result<Frame> {
    Ok(match value {
        Value::String(s) => Frame::Bulk(s.as_bytes().to_vec()),
        Value::Boolean(true) => Frame::Int(1),
        Value::Integer(n) => Frame::Int(*n),
        Value::Number(n) => Frame::Int(truncate(*n)),
        Value::Table(t) => {
            if let Value::String(err) = t.raw_get::<Value>("err")? {
                return Ok(Frame::Error(err.to_string_lossy()));
            }
            if let Value::String(ok) = t.raw_get::<Value>("ok")? {
                return Ok(Frame::Status(
                    ok.to_string_lossy().replace(['\r', '\n'], " "),
                ));
            }
            let mut items = Vec::new();
            for i in 1.. {
                let item: Value = t.raw_get(i)?;
                if item.is_nil() {
                    break;
                }
                items.push(to_frame(&item)?);
            }
            Frame::Array(items)
        }
        _ => Frame::Nil,
    })
}

/// A Lua number as Redis replies with it: C's `(long long)` cast, which truncates towards zero
/// and, on x86-64, gives `i64::MIN` for NaN and out-of-range values.
pub fn truncate(n: f64) -> i64 {
    // 2^63 as a double: the first value past i64::MAX.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if n.is_finite() && n > -LIMIT - 1.0 && n < LIMIT {
        n.trunc() as i64
    } else {
        i64::MIN
    }
}

/// A Lua number as a command argument: `%.17g`, as Redis 7.0 writes it.
pub fn number_argument(n: f64) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n < 0.0 { "-inf" } else { "inf" }.into();
    }
    if n == 0.0 {
        return if n.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // 17 significant digits, rounded once; the exponent is the rounded one, as printf's.
    let scientific = format!("{n:.16e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if !(-4..17).contains(&exponent) {
        let mantissa = strip_zeros(mantissa);
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    let decimals = usize::try_from(16 - exponent).unwrap_or(0);
    strip_zeros(&format!("{n:.decimals$}")).to_owned()
}

fn strip_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_truncated_towards_zero() {
        assert_eq!(truncate(3.99), 3);
        assert_eq!(truncate(-3.99), -3);
        assert_eq!(truncate(-0.5), 0);
        assert_eq!(truncate(1e300), i64::MIN);
        assert_eq!(truncate(f64::NAN), i64::MIN);
        assert_eq!(truncate(-9_223_372_036_854_775_808.0), i64::MIN);
    }

    #[test]
    fn number_arguments_are_written_as_percent_17g() {
        for (n, text) in [
            (1000.0, "1000"),
            (-42.0, "-42"),
            (1.5, "1.5"),
            (0.1, "0.10000000000000001"),
            (1e17, "1e+17"),
            (12345678901234567.0, "12345678901234568"),
            (1e-5, "1.0000000000000001e-05"),
            (0.0001, "0.0001"),
            (1_753_000_000_123_456.0, "1753000000123456"),
        ] {
            assert_eq!(number_argument(n), text, "{n}");
        }
    }

    #[test]
    fn error_texts_always_carry_a_code() {
        assert_eq!(error_text("oops"), "ERR oops");
        assert_eq!(error_text("-oops"), "ERR oops");
        assert_eq!(error_text("-MY code\r\n"), "MY code");
        assert_eq!(error_text("MY code"), "MY code");
        assert_eq!(
            error_text("-WRONGTYPE Operation against a key"),
            "WRONGTYPE Operation against a key"
        );
    }

    #[test]
    fn replies_round_trip_through_lua_as_redis_converts_them() {
        let lua = Lua::new();
        let frame = Frame::Array(vec![
            Frame::Int(7),
            Frame::bulk("x"),
            Frame::Status("OK".into()),
            Frame::Array(vec![Frame::Int(1)]),
        ]);
        let value = to_lua(&lua, &frame).expect("to lua");
        assert_eq!(to_frame(&value).expect("to frame"), frame);
        // A nil inside an array comes back as false, and false goes out as a nil.
        let with_nil = Frame::Array(vec![Frame::Nil, Frame::Int(2)]);
        let value = to_lua(&lua, &with_nil).expect("to lua");
        assert_eq!(to_frame(&value).expect("to frame"), with_nil);
    }

    #[test]
    fn script_values_become_replies() {
        let lua = Lua::new();
        let eval = |code: &str| {
            let value: Value = lua.load(code).eval().expect("eval");
            to_frame(&value).expect("to frame")
        };
        assert_eq!(eval("return 3.99"), Frame::Int(3));
        assert_eq!(eval("return true"), Frame::Int(1));
        assert_eq!(eval("return false"), Frame::Nil);
        assert_eq!(eval("return nil"), Frame::Nil);
        assert_eq!(
            eval("return {1, 'a', false, nil, 5}"),
            Frame::Array(vec![Frame::Int(1), Frame::bulk("a"), Frame::Nil])
        );
        assert_eq!(eval("return {ok = 'FINE'}"), Frame::Status("FINE".into()));
        assert_eq!(
            eval("return {err = 'ERR no', ok = 'x'}"),
            Frame::error("ERR no")
        );
        assert_eq!(eval("return print"), Frame::Nil);
    }
}
