//! Mutations of a description file for the fuzz tests of the ESI and the ENI reader: byte
//! runs overwritten, inserted or deleted near XML syntax.

use proptest::prelude::*;

/// A mutation of a file: overwrite, insert or delete a byte run, drawn near XML syntax.
#[derive(Debug, Clone)]
pub enum Edit {
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
}

pub fn edit() -> impl Strategy<Value = Edit> {
    let bytes = prop_oneof![
        Just(b'<'),
        Just(b'>'),
        Just(b'/'),
        Just(b'"'),
        Just(b'#'),
        Just(b'x'),
        Just(b'&'),
        Just(b'0'),
        Just(b'9'),
        Just(0xE4u8),
        Just(0xFFu8),
        any::<u8>()
    ];
    let snippets = prop_oneof![
        Just(b"#xZZ".to_vec()),
        Just(b"<Entry>".to_vec()),
        Just(b"</Index>".to_vec()),
        Just(b"<![CDATA[".to_vec()),
        Just(b"&amp;".to_vec()),
        Just(b"&#0;".to_vec()),
        Just(b"99999999999999999999".to_vec()),
        Just(b"<Index>#x1600</Index>".to_vec()),
        Just(b"<Exclude>#x1600</Exclude>".to_vec()),
        proptest::collection::vec(any::<u8>(), 1..8),
    ];
    prop_oneof![
        (any::<usize>(), bytes).prop_map(|(i, b)| Edit::Set(i, b)),
        (any::<usize>(), snippets).prop_map(|(i, s)| Edit::Insert(i, s)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Edit::Delete(i, n)),
        any::<usize>().prop_map(Edit::Truncate),
    ]
}

pub fn apply(mut b: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let n = b.len().max(1);
        match e {
            Edit::Set(i, x) => {
                if !b.is_empty() {
                    b[i % n] = *x;
                }
            }
            Edit::Insert(i, s) => {
                let at = i % (b.len() + 1);
                b.splice(at..at, s.iter().copied());
            }
            Edit::Delete(i, k) => {
                let at = i % n;
                let end = (at + k).min(b.len());
                b.drain(at.min(b.len())..end);
            }
            Edit::Truncate(i) => b.truncate(i % n),
        }
    }
    b
}
