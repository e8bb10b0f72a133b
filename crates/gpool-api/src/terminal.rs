//! Interactive sessions (`gpool run --pty`, `gpool attach`): the frames a
//! client and a job's shim send each other, end to end. The control plane
//! and the node's agent between them only carry bytes; neither reads a frame.
//!
//! A frame is one byte of kind, four of payload length (big-endian), then
//! the payload. A payload is at most [`MAX_PAYLOAD`] bytes; a longer one,
//! or a kind this version does not know, is an error that ends the session,
//! never a panic or an unbounded allocation.

use serde::{Deserialize, Serialize};

/// The largest payload a frame may carry.
pub const MAX_PAYLOAD: usize = 1 << 20;

const HEADER: usize = 5;

/// One frame of a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Client → job: keystrokes, as the terminal sends them (Ctrl-C is byte 3).
    Input(Vec<u8>),
    /// Client → job: the client's window size; the job gets `SIGWINCH`.
    Resize { rows: u16, cols: u16 },
    /// Client → job: the client is still there (sent every few seconds).
    Ping,
    /// Job → client: what the job wrote to its terminal.
    Output(Vec<u8>),
    /// Job → client: a line from gpool itself (another client attached, say).
    Notice(String),
    /// Job → client: the command ended; the last frame of a session.
    Exit(ExitFrame),
    /// Job → client: another client took the session over; this one is
    /// detached (and must not take it back by itself).
    TakenOver,
}

/// How the command of an interactive job ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitFrame {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Why gpool ended it, when it did (the session was detached too long).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ExitFrame {
    /// The status a shell would give: the code, or 128 + the signal.
    pub fn status(&self) -> u8 {
        match (self.code, self.signal) {
            (Some(c), _) => (c & 0xff) as u8,
            (None, Some(s)) => (128 + (s & 0x7f)) as u8,
            (None, None) => 1,
        }
    }
}

/// A frame that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a terminal frame of unknown kind {0:#04x}: the other side speaks another version of gpool")]
    UnknownKind(u8),
    #[error("a terminal frame of {0} bytes is over the limit of {MAX_PAYLOAD}")]
    TooLong(usize),
    #[error("a terminal frame's payload is malformed: {0}")]
    Malformed(String),
}

impl Frame {
    fn kind(&self) -> u8 {
        match self {
            Frame::Input(_) => b'i',
            Frame::Resize { .. } => b'w',
            Frame::Ping => b'p',
            Frame::Output(_) => b'o',
            Frame::Notice(_) => b'n',
            Frame::Exit(_) => b'x',
            Frame::TakenOver => b't',
        }
    }

    /// The frame as it travels.
    pub fn encode(&self) -> Vec<u8> {
        let payload: std::borrow::Cow<'_, [u8]> = match self {
            Frame::Input(b) | Frame::Output(b) => b.as_slice().into(),
            Frame::Resize { rows, cols } => [rows.to_be_bytes(), cols.to_be_bytes()].concat().into(),
            Frame::Ping | Frame::TakenOver => (&[][..]).into(),
            Frame::Notice(s) => s.as_bytes().into(),
            Frame::Exit(e) => serde_json::to_vec(e).unwrap_or_default().into(),
        };
        let mut out = Vec::with_capacity(HEADER + payload.len());
        out.push(self.kind());
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&payload);
        out
    }

    fn decode(kind: u8, payload: &[u8]) -> Result<Frame, FrameError> {
        Ok(match kind {
            b'i' => Frame::Input(payload.to_vec()),
            b'o' => Frame::Output(payload.to_vec()),
            b'p' => Frame::Ping,
            b't' => Frame::TakenOver,
            b'w' => match payload {
                [r0, r1, c0, c1] => {
                    Frame::Resize { rows: u16::from_be_bytes([*r0, *r1]), cols: u16::from_be_bytes([*c0, *c1]) }
                }
                _ => return Err(FrameError::Malformed(format!("a resize has 4 bytes, not {}", payload.len()))),
            },
            b'n' => Frame::Notice(String::from_utf8_lossy(payload).into_owned()),
            b'x' => Frame::Exit(serde_json::from_slice(payload).map_err(|e| FrameError::Malformed(e.to_string()))?),
            k => return Err(FrameError::UnknownKind(k)),
        })
    }
}

/// Reads the next frame from `r`; `None` at a clean end of the stream
/// (between frames). A stream that ends inside a frame, or a frame that
/// cannot be read ([`FrameError`]), is an error of kind `InvalidData` or
/// `UnexpectedEof`. Reads only the frame's bytes, so what follows stays in `r`.
pub fn read_frame(r: &mut impl std::io::Read) -> std::io::Result<Option<Frame>> {
    let mut header = [0u8; HEADER];
    let mut got = 0;
    while got < HEADER {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let [kind, a, b, c, d] = header;
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if len > MAX_PAYLOAD {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, FrameError::TooLong(len)));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Frame::decode(kind, &payload).map(Some).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// `POST /api/v1/jobs/{id}/attach`: a session opened on an interactive job's
/// terminal. Its client then reads `GET /api/v1/terminals/{session}/output`
/// and writes `POST /api/v1/terminals/{session}/input`, within 30 s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AttachView {
    pub job: u64,
    /// A secret naming the session: only its caller may use it.
    pub session: String,
    /// The node the job runs on.
    pub node: String,
    /// How long the job outlives its last client, in seconds.
    pub detach_grace_s: u64,
    /// Where the service proxy serves the ports the job exposes (`--expose`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exposed: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_survive_any_split_of_the_stream() {
        let frames = vec![
            Frame::Resize { rows: 40, cols: 132 },
            Frame::Input(b"ls\r\x03".to_vec()),
            Frame::Ping,
            Frame::Output(vec![0, 255, 27, b'[']),
            Frame::Notice("the job's node restarts".into()),
            Frame::TakenOver,
            Frame::Exit(ExitFrame { code: Some(7), signal: None, error: None }),
        ];
        let bytes: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        for piece in [1, 2, 3, 5, 7, bytes.len()] {
            // A reader that yields at most `piece` bytes at a time, as a socket may.
            let mut r = Trickle { data: &bytes, piece };
            let mut got = Vec::new();
            while let Some(f) = read_frame(&mut r).expect("valid frames") {
                got.push(f);
            }
            assert_eq!(got, frames, "read {piece} bytes at a time");
        }
    }

    struct Trickle<'a> {
        data: &'a [u8],
        piece: usize,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.piece.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_bad_frame_is_an_error_not_a_panic_nor_an_allocation() {
        let err = |bytes: &[u8]| read_frame(&mut &bytes[..]).expect_err("not a frame").to_string();
        assert!(err(&[b'o', 0xff, 0xff, 0xff, 0xff]).contains("over the limit"), "a 4 GiB frame is refused unread");
        assert!(err(&[b'?', 0, 0, 0, 0]).contains("unknown kind"));
        assert!(err(&[b'w', 0, 0, 0, 1, 9]).contains("malformed"));
        let cut = |bytes: &[u8]| read_frame(&mut &bytes[..]).expect_err("cut").kind();
        assert_eq!(cut(&[b'o', 0, 0]), std::io::ErrorKind::UnexpectedEof, "a stream cut inside a header");
        assert_eq!(cut(&[b'o', 0, 0, 0, 9, 1]), std::io::ErrorKind::UnexpectedEof, "… and inside a payload");
        assert_eq!(read_frame(&mut &[][..]).expect("a clean end"), None);
    }

    #[test]
    fn an_exit_gives_the_status_a_shell_would() {
        assert_eq!(ExitFrame { code: Some(7), ..Default::default() }.status(), 7);
        assert_eq!(ExitFrame { signal: Some(2), ..Default::default() }.status(), 130);
        assert_eq!(ExitFrame::default().status(), 1);
    }
}
