//! Reading what a master answers: strictly, so that anything unexpected becomes a typed error
//! instead of a wrong vote (and never a panic).

use crate::error::NodeErrorKind;
use crate::transport::resp::Reply;

/// Reads the reply of `SET … NX`: `OK` if set, nil if the key exists.
pub(crate) fn set_nx_reply(value: Reply) -> Result<bool, NodeErrorKind> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_strictly() {
        assert_eq!(set_nx_reply(Reply::Status("OK".into())), Ok(true));
        assert_eq!(set_nx_reply(Reply::Nil), Ok(false));
        assert!(matches!(
            set_nx_reply(Reply::Int(1)),
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
}
