//! Reading what a master answers: strictly, so that anything unexpected becomes a typed error
//! instead of a wrong vote (and never a panic).

use std::time::Duration;

use redis::RedisError;

use crate::error::NodeErrorKind;
use crate::round::master::AcquireReply;
use crate::transport::resp::Reply;

/// Reads the reply of `SET … NX`: `OK` if set, nil if the key exists.
pub(crate) fn set_reply(value: Reply) -> Result<bool, NodeErrorKind> {
    match value {
        Reply::Status(s) if s == "OK" => Ok(true),
        Reply::Nil => Ok(false),
        other => Err(unexpected("OK or nil", &other)),
    }
}

/// Reads the 0/1 reply of a compare-and-… script.
pub(crate) fn flag_reply(value: Reply) -> Result<bool, NodeErrorKind> {
    match value {
        Reply::Int(1) => Ok(true),
        Reply::Int(0) => Ok(false),
        other => Err(unexpected("integer 0 or 1", &other)),
    }
}

/// Reads the `{granted, token, epoch_age_ms, pttl_ms}` reply of the acquire script.
pub(crate) fn acquire_reply(
    value: Reply,
    fencing: bool,
    epoch_check: bool,
) -> Result<AcquireReply, NodeErrorKind> {
    const EXPECTED: &str = "an array of four integers {granted, token, epoch_age_ms, pttl_ms}";
    let Reply::Array(items) = &value else {
        return Err(unexpected(EXPECTED, &value));
    };
    let [Reply::Int(granted), Reply::Int(token), Reply::Int(age), Reply::Int(pttl)] =
        items.as_slice()
    else {
        return Err(unexpected(EXPECTED, &value));
    };
    let granted = match granted {
        0 => false,
        1 => true,
        _ => return Err(unexpected(EXPECTED, &value)),
    };
    let token = match (granted && fencing, u64::try_from(*token)) {
        (false, _) => None,
        (true, Ok(token)) if token > 0 => Some(token),
        (true, _) => return Err(unexpected("a positive fencing token", &value)),
    };
    let epoch_age = match (epoch_check, u64::try_from(*age)) {
        (false, _) => None,
        (true, Ok(ms)) => Some(Duration::from_millis(ms)),
        // A marker "from the future" (the node's clock went backwards): treat it as brand new.
        (true, Err(_)) => Some(Duration::ZERO),
    };
    Ok(AcquireReply {
        granted,
        token,
        epoch_age,
        remaining: if granted {
            None
        } else {
            remaining_of_pttl(*pttl)
        },
    })
}

/// What a refusal's `PTTL` says about when the holder's key goes: `Some(ttl)`, `Some(ZERO)`
/// for a key gone meanwhile (-2), `None` for a key without a TTL (-1: it never expires by
/// itself) or anything else unexpected.
pub(crate) fn remaining_of_pttl(pttl: i64) -> Option<Duration> {
    match pttl {
        -2 => Some(Duration::ZERO),
        ms => u64::try_from(ms).ok().map(Duration::from_millis),
    }
}

/// An [`NodeErrorKind::UnexpectedReply`] that shows (the start of) what came back.
pub(crate) fn unexpected(expected: &str, got: &Reply) -> NodeErrorKind {
    NodeErrorKind::UnexpectedReply(format!("expected {expected}, got {}", shown(got)))
}

/// A reply as text, cut to 80 characters.
pub(crate) fn shown(value: &Reply) -> String {
    let mut text = match value {
        Reply::Bulk(bytes) => format!("bulk {:?}", String::from_utf8_lossy(bytes)),
        other => format!("{other:?}"),
    };
    if text.len() > 80 {
        let cut = (0..=80)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// What a `redis` error means for the lock, and whether the connection it came from is broken.
pub(crate) fn classify(error: &RedisError) -> (NodeErrorKind, bool) {
    use redis::ErrorKind;
    match error.kind() {
        // The server answered with an error reply: the connection is fine.
        ErrorKind::Server(_) | ErrorKind::Extension => {
            (NodeErrorKind::Server(describe(error)), false)
        }
        // The reply stream could not be parsed: every later reply would be misread.
        ErrorKind::Parse => (NodeErrorKind::UnexpectedReply(describe(error)), true),
        ErrorKind::UnexpectedReturnType => (NodeErrorKind::UnexpectedReply(describe(error)), false),
        _ => (NodeErrorKind::ConnectionLost(describe(error)), true),
    }
}

/// A `redis` error as a lowercase message.
pub(crate) fn describe(error: &RedisError) -> String {
    let text = error.to_string();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_strictly() {
        assert_eq!(set_reply(Reply::Status("OK".into())), Ok(true));
        assert_eq!(set_reply(Reply::Nil), Ok(false));
        assert!(matches!(
            set_reply(Reply::Int(1)),
            Err(NodeErrorKind::UnexpectedReply(_))
        ));
        assert_eq!(flag_reply(Reply::Int(1)), Ok(true));
        assert_eq!(flag_reply(Reply::Int(0)), Ok(false));
        assert!(matches!(
            flag_reply(Reply::Int(7)),
            Err(NodeErrorKind::UnexpectedReply(_))
        ));
        let long = Reply::Bulk(vec![b'x'; 1000]);
        match flag_reply(long) {
            Err(NodeErrorKind::UnexpectedReply(text)) => assert!(text.len() < 200, "{text}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn acquire_replies_are_read_strictly() {
        let ok = Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(42),
            Reply::Int(5),
            Reply::Int(-2),
        ]);
        assert_eq!(
            acquire_reply(ok.clone(), true, true),
            Ok(AcquireReply {
                granted: true,
                token: Some(42),
                epoch_age: Some(Duration::from_millis(5)),
                remaining: None,
            })
        );
        assert_eq!(
            acquire_reply(ok, false, false),
            Ok(AcquireReply {
                granted: true,
                token: None,
                epoch_age: None,
                remaining: None,
            })
        );
        let refused = |pttl| {
            Reply::Array(vec![
                Reply::Int(0),
                Reply::Int(0),
                Reply::Int(-1),
                Reply::Int(pttl),
            ])
        };
        assert_eq!(
            acquire_reply(refused(1500), true, false).map(|r| (r.granted, r.remaining)),
            Ok((false, Some(Duration::from_millis(1500))))
        );
        // A key gone meanwhile is free now; one without a TTL never frees itself.
        assert_eq!(
            acquire_reply(refused(-2), true, false).map(|r| r.remaining),
            Ok(Some(Duration::ZERO))
        );
        assert_eq!(
            acquire_reply(refused(-1), true, false).map(|r| r.remaining),
            Ok(None)
        );
        for bad in [
            Reply::Nil,
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Int(0),
                Reply::Int(0),
                Reply::Int(-2),
            ]),
            Reply::Array(vec![
                Reply::Int(2),
                Reply::Int(1),
                Reply::Int(0),
                Reply::Int(-2),
            ]),
            Reply::Array(vec![Reply::Int(1), Reply::Int(1), Reply::Int(0)]),
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Int(-4),
                Reply::Int(0),
                Reply::Int(-2),
            ]),
        ] {
            assert!(acquire_reply(bad, true, true).is_err());
        }
    }
}
