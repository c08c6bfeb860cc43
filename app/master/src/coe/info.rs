//! SDO information (ETG.1000.6 §5.6.3) over any mailbox [`Transport`]: the blocking transport of
//! the PRE-OP tools, or the cyclic thread's queue while the master runs
//! ([`crate::acyclic::QueueMailbox`]; the control socket's `od_list` and `od_object`, the
//! commissioning page's object dictionary). [`super::Client`] has the same services on its own
//! blocking mailbox; these take whatever carries the mailbox.
//!
//! A response may come in fragments (§5.6.3.2): the first answers the request, the others are
//! sent by the device unasked, so they are polled for ([`Transport::poll`]) until `wait` passes.

use super::frame::{self, Response};
use super::{EntryDescription, Error, ListType, MAX_INFO, ObjectDescription};
use crate::mailbox::{self, Transport};
use std::time::{Duration, Instant};

/// The indices of the objects in `list` (Get OD list).
pub fn od_list(t: &mut impl Transport, list: ListType, wait: Duration) -> Result<Vec<u16>, Error> {
    let what = format!("SDO information: OD list (type {})", list as u16);
    let req = request(t, |b| frame::od_list_request(b, 0, list as u16));
    let data = info(t, &req, frame::opcode::OD_LIST_RESP, (0, 0), &what, wait)?;
    let (_, list) = frame::parse_od_list(&data).map_err(|e| malformed(t, &what, e.to_string()))?;
    Ok(list)
}

/// The description of object `index` (Get object description).
pub fn object_description(
    t: &mut impl Transport,
    index: u16,
    wait: Duration,
) -> Result<ObjectDescription, Error> {
    let what = format!("SDO information: object {index:#06x} description");
    let req = request(t, |b| frame::object_description_request(b, 0, index));
    let data = info(
        t,
        &req,
        frame::opcode::OBJECT_DESC_RESP,
        (index, 0),
        &what,
        wait,
    )?;
    let d =
        frame::parse_object_description(&data).map_err(|e| malformed(t, &what, e.to_string()))?;
    if d.index != index {
        return Err(malformed(
            t,
            &what,
            format!("description of {:#06x}", d.index),
        ));
    }
    Ok(d)
}

/// The description of entry `index:sub` (Get entry description, no value information).
pub fn entry_description(
    t: &mut impl Transport,
    index: u16,
    sub: u8,
    wait: Duration,
) -> Result<EntryDescription, Error> {
    let what = format!("SDO information: entry {index:#06x}:{sub:02x} description");
    let req = request(t, |b| frame::entry_description_request(b, 0, index, sub));
    let data = info(
        t,
        &req,
        frame::opcode::ENTRY_DESC_RESP,
        (index, sub),
        &what,
        wait,
    )?;
    let d =
        frame::parse_entry_description(&data).map_err(|e| malformed(t, &what, e.to_string()))?;
    if (d.index, d.sub) != (index, sub) {
        return Err(malformed(
            t,
            &what,
            format!("description of {:#06x}:{:02x}", d.index, d.sub),
        ));
    }
    Ok(d)
}

/// A request in a buffer of the receive mailbox's size (the transport stamps the counter).
fn request(t: &impl Transport, build: impl FnOnce(&mut [u8]) -> usize) -> Vec<u8> {
    let mut b = vec![0u8; usize::from(t.geometry().rx_size).max(frame::SDO_REQUEST_LEN)];
    let n = build(&mut b);
    b.truncate(n);
    b
}

fn malformed(t: &impl Transport, what: &str, why: impl Into<String>) -> Error {
    Error::Malformed {
        position: t.position(),
        what: what.to_string(),
        why: why.into(),
    }
}

/// One SDO information service: the request, its response fragments' data concatenated.
fn info(
    t: &mut impl Transport,
    req: &[u8],
    want: u8,
    (index, sub): (u16, u8),
    what: &str,
    wait: Duration,
) -> Result<Vec<u8>, Error> {
    let start = Instant::now();
    let mut mb = t.transact(req, what)?;
    let mut out = Vec::new();
    let mut expect_left: Option<u16> = None;
    loop {
        let r = frame::parse(&mb).map_err(|e| malformed(t, what, e.to_string()))?;
        match r {
            Response::InfoError { code } | Response::Abort { code, .. } => {
                return Err(Error::Abort {
                    position: t.position(),
                    index,
                    sub,
                    code,
                });
            }
            // Sent unasked meanwhile: not the answer; the next mailbox is.
            Response::Emergency { .. } | Response::OtherProtocol { .. } => {}
            Response::Info {
                opcode,
                incomplete,
                fragments_left,
                data,
            } => {
                if opcode != want {
                    return Err(malformed(
                        t,
                        what,
                        format!("SDO information opcode {opcode:#x}, expected {want:#x}"),
                    ));
                }
                if let Some(e) = expect_left
                    && fragments_left != e
                {
                    return Err(malformed(
                        t,
                        what,
                        format!(
                            "fragment with {fragments_left} left after one with {}",
                            e + 1
                        ),
                    ));
                }
                if out.len() + data.len() > MAX_INFO {
                    return Err(malformed(
                        t,
                        what,
                        format!("SDO information response beyond {MAX_INFO} bytes"),
                    ));
                }
                out.extend_from_slice(data);
                if !incomplete {
                    return Ok(out);
                }
                let Some(next) = fragments_left.checked_sub(1) else {
                    return Err(malformed(
                        t,
                        what,
                        "fragment marked incomplete with 0 fragments left",
                    ));
                };
                expect_left = Some(next);
            }
            r => {
                return Err(malformed(
                    t,
                    what,
                    format!("not an SDO information response: {r:?}"),
                ));
            }
        }
        // The next fragment (or the answer after an unasked mailbox): the device sends it on
        // its own, so look for it until `wait` has passed.
        mb = loop {
            if let Some(m) = t.poll(mailbox::kind::COE, what)? {
                break m;
            }
            if start.elapsed() > wait {
                return Err(Error::Timeout {
                    position: t.position(),
                    step: format!("{what}: next fragment"),
                    timeout: wait,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        };
    }
}
