//! The log's payload format: a batch's records as postcard frames, encoded and decoded.
//!
//! The storage layer stores opaque payloads; this module is what they mean. It owns the frame
//! split (never between the two records of one command) and a hand-written encoder for the hot
//! records that must produce exactly postcard's bytes. It must never change how an existing
//! record is encoded: a log written by an earlier release must still decode.

use stockd_core::Record;

/// A log frame is closed once its encoded records pass this size; far below the storage's
/// record limit, so that no batch (a mass expiry, a restock serving thousands of waiters) can
/// produce a frame the log refuses.
const FRAME_BYTES_TARGET: usize = 4 << 20;

/// The most bytes postcard's varint of a `usize` takes.
const COUNT_BYTES_MAX: usize = 10;

/// Encodes a batch's records as one or more log frames, each a postcard `Vec<Record>`.
///
/// A frame may end after any record except a `Held` with `confirm`: the `Confirmed` that
/// follows it is the same command, and a crash between two frames must never leave half of one
/// command on disk (a hold reserved "with confirm" but only held). Every other record is a
/// consistent state change on its own, and none of the batch was acknowledged before all its
/// frames are synced. `body` is scratch space, empty on return.
pub(crate) fn encode_frames(records: &[stockd_core::Record], body: &mut Vec<u8>) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    body.clear();
    let mut count = 0usize;
    for (index, record) in records.iter().enumerate() {
        encode_record(record, body);
        count += 1;
        let splittable = !matches!(
            record.change,
            stockd_core::Change::Held { confirm: true, .. }
        );
        let last = index + 1 == records.len();
        if last || (splittable && body.len() >= FRAME_BYTES_TARGET) {
            // postcard encodes a Vec as its length (varint) followed by the elements.
            let mut frame = Vec::with_capacity(COUNT_BYTES_MAX + body.len());
            postcard::serialize_with_flavor(&count, Append(&mut frame))
                .expect("serialising to memory cannot fail");
            frame.extend_from_slice(body);
            frames.push(frame);
            body.clear();
            count = 0;
        }
    }
    frames
}

/// Decodes one log frame back into its records.
pub(crate) fn decode_frame(payload: &[u8]) -> Result<Vec<Record>, postcard::Error> {
    postcard::from_bytes(payload)
}

/// The variant numbers postcard gives `Change::Held` and `Change::Confirmed` (their places in
/// the enum; `encoded_by_hand_as_postcard_encodes` fails if they move).
const HELD_VARIANT: u64 = 3;
const CONFIRMED_VARIANT: u64 = 4;

/// Appends `record` to `out` exactly as postcard encodes it. The two records of every reserve
/// with confirm, `Held` and `Confirmed`, are written here without serde's machinery (a
/// proptest holds them to postcard's bytes): about half of the records' encoding cost on the
/// writer. The others go through postcard.
fn encode_record(record: &stockd_core::Record, out: &mut Vec<u8>) {
    use stockd_core::Change;
    match &record.change {
        Change::Held {
            hold_id,
            user,
            items,
            confirm,
            expires_at_ms,
        } => {
            varint(out, record.at_ms);
            varint(out, HELD_VARIANT);
            text(out, hold_id.as_str());
            match user {
                None => out.push(0),
                Some(user) => {
                    out.push(1);
                    text(out, user.as_str());
                }
            }
            varint(out, items.len() as u64);
            for item in items.iter() {
                text(out, item.pool.as_str());
                varint(out, item.qty);
            }
            out.push(u8::from(*confirm));
            varint(out, *expires_at_ms);
        }
        Change::Confirmed { hold_id } => {
            varint(out, record.at_ms);
            varint(out, CONFIRMED_VARIANT);
            text(out, hold_id.as_str());
        }
        _ => postcard::serialize_with_flavor(record, Append(out))
            .expect("serialising to memory cannot fail"),
    }
}

/// postcard's varint: seven bits a byte, least significant first, the top bit set on every
/// byte but the last.
fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// postcard's string: its length in bytes as a varint, then the bytes.
fn text(out: &mut Vec<u8>, text: &str) {
    varint(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

/// A postcard output that appends to a vector it borrows. postcard's own `to_extend` goes
/// through `Extend<u8>` a byte slice at a time, and its `AllocVec` cannot take a vector that
/// already has room: this one copies each slice with `extend_from_slice` into the kept buffer
/// (about a third fewer instructions for a batch's records, `scripts/bench-instructions.sh`).
struct Append<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for Append<'_> {
    type Output = ();

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.push(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use stockd_core::{Change, HoldId, HoldItem, PoolId, Record, UserId};

    use super::*;

    fn id() -> impl Strategy<Value = String> {
        "[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
    }

    fn any_record() -> impl Strategy<Value = Record> {
        let held = (
            id(),
            proptest::option::of(id()),
            proptest::collection::vec((id(), any::<u64>()), 1..=64),
            any::<bool>(),
            any::<u64>(),
        )
            .prop_map(
                |(hold_id, user, items, confirm, expires_at_ms)| Change::Held {
                    hold_id: HoldId::parse(&hold_id).unwrap(),
                    user: user.map(|user| UserId::parse(&user).unwrap()),
                    items: items
                        .into_iter()
                        .map(|(pool, qty)| HoldItem {
                            pool: PoolId::parse(&pool).unwrap(),
                            qty,
                        })
                        .collect(),
                    confirm,
                    expires_at_ms,
                },
            );
        let confirmed = id().prop_map(|hold_id| Change::Confirmed {
            hold_id: HoldId::parse(&hold_id).unwrap(),
        });
        let released = id().prop_map(|hold_id| Change::Released {
            hold_id: HoldId::parse(&hold_id).unwrap(),
        });
        (any::<u64>(), prop_oneof![held, confirmed, released])
            .prop_map(|(at_ms, change)| Record { at_ms, change })
    }

    proptest! {
        #[test]
        fn encoded_by_hand_as_postcard_encodes(record in any_record()) {
            let mut out = vec![7];
            encode_record(&record, &mut out);
            let mut want = vec![7];
            want.extend(postcard::to_allocvec(&record).unwrap());
            prop_assert_eq!(out, want);
        }
    }

    fn claim(n: usize) -> [Record; 2] {
        let hold_id = HoldId::parse(&format!("{n:0>120}")).unwrap();
        [
            Record {
                at_ms: 1,
                change: Change::Held {
                    hold_id: hold_id.clone(),
                    user: None,
                    items: vec![HoldItem {
                        pool: PoolId::parse("p").unwrap(),
                        qty: 1,
                    }]
                    .into(),
                    confirm: true,
                    expires_at_ms: 2,
                },
            },
            Record {
                at_ms: 1,
                change: Change::Confirmed { hold_id },
            },
        ]
    }

    #[test]
    fn big_batches_split_into_frames_between_commands() {
        // ~300 bytes per claim: 40,000 claims is about three frames' worth.
        let records: Vec<Record> = (0..40_000).flat_map(claim).collect();
        let frames = encode_frames(&records, &mut Vec::new());
        assert!(frames.len() >= 2, "{} frames", frames.len());
        let mut decoded = Vec::new();
        for frame in &frames {
            assert!(frame.len() < FRAME_BYTES_TARGET + 4096);
            let part: Vec<Record> = postcard::from_bytes(frame).unwrap();
            // No frame ends between a confirm-on-create Held and its Confirmed.
            assert!(matches!(
                part.last().unwrap().change,
                Change::Confirmed { .. }
            ));
            decoded.extend(part);
        }
        assert_eq!(decoded, records);
    }

    #[test]
    fn a_small_batch_is_one_frame_and_an_empty_one_none() {
        let records: Vec<Record> = (0..3).flat_map(claim).collect();
        let frames = encode_frames(&records, &mut Vec::new());
        assert_eq!(frames.len(), 1);
        assert_eq!(
            postcard::from_bytes::<Vec<Record>>(&frames[0]).unwrap(),
            records
        );
        assert!(encode_frames(&[], &mut Vec::new()).is_empty());
    }
}
