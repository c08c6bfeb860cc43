//! CoE on a whole segment for the tools (`rtcat sdo`, `rtcat config from-bus`): the segment
//! brought to PRE-OP by ethercrab's group initialisation (the mailboxes work from PRE-OP on,
//! ETG.1000.6 §5.6.1), each subdevice's SII read for its mailbox protocols and sync managers,
//! a [`BusClient`] per subdevice on demand, and the segment put back to INIT at the end, as
//! `rtcat pdos` leaves it.

use super::{BusClient, Client, Error as CoeError, ListType, Timeouts};
use crate::diag::{Error, Result};
use crate::layout::{Identity, SubdeviceSource};
use crate::sii::{self, Direction, Sii, SmUsage};
use ethercrab::MainDevice;
use serde::Serialize;
use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// SII categories the tools need: names, CoE details, sync managers, fixed PDOs.
const WANTED: [u16; 5] = [
    sii::category::STRINGS,
    sii::category::GENERAL,
    sii::category::SYNC_MANAGER,
    sii::category::TXPDO,
    sii::category::RXPDO,
];

/// One subdevice of a segment in PRE-OP.
#[derive(Debug, Clone)]
pub struct Device {
    /// Position (0 = first after the master).
    pub position: u16,
    /// Station address ethercrab gave it.
    pub address: u16,
    /// Alias.
    pub alias: u16,
    /// Name (ethercrab's: the SII General name, else the order code).
    pub name: String,
    /// Identity.
    pub identity: Identity,
    /// Its SII: strings, General, sync managers and PDO categories.
    pub sii: Sii,
}

impl Device {
    /// Why a protocol cannot be used: "NAME does not announce PROTO in its SII (mailbox
    /// protocols ...)".
    pub fn not_announced(&self, protocol: &str) -> String {
        format!(
            "{} does not announce {protocol} in its SII (mailbox protocols {})",
            if self.name.is_empty() {
                "the subdevice"
            } else {
                &self.name
            },
            match self.sii.protocols.names() {
                n if n.is_empty() => "none".to_string(),
                n => n.join(" "),
            }
        )
    }

    /// Speaks CoE: the SII announces it and has a standard mailbox.
    pub fn coe(&self) -> bool {
        self.sii.protocols.coe && self.sii.mailbox.is_some()
    }

    /// Announces the SDO information service (General category, CoE details bit 1,
    /// ETG.2010 Table 5).
    pub fn sdo_info(&self) -> bool {
        self.coe()
            && self
                .sii
                .general
                .as_ref()
                .is_some_and(|g| g.coe_details & 0x02 != 0)
    }

    /// Announces SDO complete access (CoE details bit 5).
    pub fn complete_access(&self) -> bool {
        self.coe()
            && self
                .sii
                .general
                .as_ref()
                .is_some_and(|g| g.coe_details & 0x20 != 0)
    }
}

/// A segment in PRE-OP.
pub struct PreOp<'a> {
    md: &'a MainDevice<'static>,
    timeouts: Timeouts,
    /// The subdevices, by position.
    pub devices: Vec<Device>,
    /// The last mailbox counter each subdevice saw from a client of this segment.
    counters: RefCell<Vec<u8>>,
}

/// A [`BusClient`] of a [`PreOp`] segment: when dropped, the segment keeps its mailbox counter,
/// and the next client of the same subdevice counts on from it.
pub struct SegmentClient<'s> {
    client: BusClient<'s>,
    counters: &'s RefCell<Vec<u8>>,
    slot: usize,
}

impl<'s> Deref for SegmentClient<'s> {
    type Target = BusClient<'s>;
    fn deref(&self) -> &BusClient<'s> {
        &self.client
    }
}

impl DerefMut for SegmentClient<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.client
    }
}

impl Drop for SegmentClient<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.counters.borrow_mut().get_mut(self.slot) {
            *c = self.client.counter();
        }
    }
}

impl PreOp<'_> {
    /// The subdevice at `position`, or [`Error::Position`] (the user's input).
    pub fn device(&self, position: u32) -> Result<&Device> {
        usize::try_from(position)
            .ok()
            .and_then(|p| self.devices.get(p))
            .ok_or(Error::Position {
                position,
                count: u16::try_from(self.devices.len()).unwrap_or(u16::MAX),
            })
    }

    /// A CoE client of the subdevice at `position`, its mailbox from the SM registers.
    pub fn client(&self, position: u32) -> Result<SegmentClient<'_>> {
        let d = self.device(position)?;
        if !d.coe() {
            return Err(Error::Coe(CoeError::NoMailbox {
                position: d.position,
                why: d.not_announced("CoE"),
            }));
        }
        let mut client = Client::on_bus(self.md, d.position, d.address, self.timeouts)?;
        let slot = usize::from(d.position);
        if let Some(&last) = self.counters.borrow().get(slot) {
            client.continue_after(last);
        }
        Ok(SegmentClient {
            client,
            counters: &self.counters,
            slot,
        })
    }
}

impl PreOp<'_> {
    /// Run `f` on the mailbox transport of the subdevice at `position`, for any protocol (FoE):
    /// its mailbox from the SM registers, its counter continuing the segment's, and kept after.
    pub fn with_mailbox<R>(
        &self,
        position: u32,
        f: impl FnOnce(&mut crate::mailbox::BusMailbox<'_>) -> R,
    ) -> Result<R> {
        let d = self.device(position)?;
        let mut m = crate::mailbox::Mailbox::on_bus(self.md, d.position, d.address, self.timeouts)?;
        let slot = usize::from(d.position);
        if let Some(&last) = self.counters.borrow().get(slot) {
            m.continue_after(last);
        }
        let r = f(&mut m);
        if let Some(c) = self.counters.borrow_mut().get_mut(slot) {
            *c = m.counter();
        }
        Ok(r)
    }

    /// Run `f` on the subdevice at `position` in BOOT, on its bootstrap mailbox (SII words
    /// 0x14..0x17): the device goes INIT → BOOT before, and after, whatever `f` returns, BOOT →
    /// INIT → PRE-OP with its standard mailbox again, like the rest of the segment (INIT only, for
    /// a device whose SII has no standard mailbox). `state` is how long each AL state change may
    /// take.
    pub fn with_boot_mailbox<R>(
        &self,
        position: u32,
        state: std::time::Duration,
        f: impl FnOnce(&mut crate::mailbox::BusMailbox<'_>) -> R,
    ) -> Result<R> {
        use crate::foe::boot;
        use crate::mailbox::{BusPort, Geometry, Mailbox};
        let d = self.device(position)?;
        let g = Geometry::bootstrap_from_sii(d.position, &d.sii)?;
        let standard = match &d.sii.mailbox {
            Some(m) => Some(Geometry::from_sii(d.position, m)?),
            None => None,
        };
        let mut port = BusPort::new(self.md, d.address);
        boot::enter(&mut port, d.position, &g, state)?;
        let mut m = Mailbox::new(port, d.position, g, self.timeouts);
        let r = f(&mut m);
        // A new start for the counter in INIT/PRE-OP: the device's mailbox was reset.
        if let Some(c) = self.counters.borrow_mut().get_mut(usize::from(d.position)) {
            *c = 0;
        }
        boot::leave(m.port(), d.position, standard.as_ref(), state)?;
        Ok(r)
    }
}

/// Bring the segment on `md` to PRE-OP, run `f` on it, and put it back to INIT (a failure to
/// do so is logged): `session::in_pre_op` with each subdevice's SII read for its mailboxes.
pub fn with_pre_op<R: Send>(
    md: &MainDevice<'static>,
    timeouts: Timeouts,
    f: impl FnOnce(&PreOp<'_>) -> Result<R> + Send,
) -> Result<R> {
    crate::session::in_pre_op(md, "rtcat-coe", |group| {
        let mut devices = Vec::new();
        let mut cache: Vec<((u32, u32, u32), Sii)> = Vec::new();
        for (i, sd) in group.iter(md).enumerate() {
            let position = u16::try_from(i).unwrap_or(u16::MAX);
            let id = sd.identity();
            let key = (id.vendor_id, id.product_id, id.revision);
            let sii = match cache.iter().find(|(k, _)| *k == key) {
                Some((_, s)) => s.clone(),
                None => {
                    let img = crate::mapping::read_sii(md, &sd, position, Some(&WANTED))?;
                    let s = Sii::parse(&img).map_err(|source| Error::Sii { position, source })?;
                    cache.push((key, s.clone()));
                    s
                }
            };
            let st = crate::mapping::Station::of(&sd, position);
            devices.push(Device {
                position,
                address: st.address,
                alias: st.alias,
                name: st.name,
                identity: st.identity,
                sii,
            });
        }
        let counters = RefCell::new(vec![0; devices.len()]);
        f(&PreOp {
            md,
            timeouts,
            devices,
            counters,
        })
    })
}

/// A mapped entry as the device holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MapEntry {
    /// Index (0 = a gap).
    pub index: u16,
    /// Subindex.
    pub sub: u8,
    /// Length in bits.
    pub bits: u8,
    /// Name: SDO information, else the SII's PDO description.
    pub name: Option<String>,
}

/// A PDO and its mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PdoMapping {
    /// PDO index (0x1600.. RxPDO, 0x1A00.. TxPDO).
    pub index: u16,
    /// Name: SDO information's object description, else the SII.
    pub name: Option<String>,
    /// Direction.
    pub direction: Direction,
    /// Whether its subindex 0 is writable in PRE-OP (SDO information's entry description);
    /// `None` when the device has no SDO information.
    pub writable: Option<bool>,
    /// Entries.
    pub entries: Vec<MapEntry>,
}

/// One process-data sync manager and the PDOs assigned to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SmAssignment {
    /// Sync manager (2 outputs, 3 inputs on the standard layout).
    pub sm: u8,
    /// Direction.
    pub direction: Direction,
    /// The assignment object (0x1C10 + sm).
    pub object: u16,
    /// Assigned PDOs in order.
    pub pdos: Vec<u16>,
    /// Whether the assignment is writable in PRE-OP; `None` without SDO information.
    pub writable: Option<bool>,
    /// Bits of the PDOs assigned.
    pub bits: u32,
}

/// A subdevice's current process-data configuration, as `rtcat config from-bus` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceMapping {
    /// Position.
    pub position: u16,
    /// Name.
    pub name: String,
    /// Alias.
    pub alias: u16,
    /// Identity.
    pub identity: Identity,
    /// Read over CoE (else the PDOs are the SII's fixed ones).
    pub coe: bool,
    /// SDO information used for names and writability.
    pub sdo_info: bool,
    /// Sync managers with their assignment: read over CoE, or without CoE the SII's (not
    /// writable; `object` is then the 0x1C10 + sm a CoE device would have).
    pub assignments: Vec<SmAssignment>,
    /// PDOs in assignment order (CoE: read from the device; SII: the fixed ones).
    pub pdos: Vec<PdoMapping>,
    /// Process data inputs in bytes (each SM rounded up to whole bytes).
    pub input_bytes: u32,
    /// Outputs in bytes.
    pub output_bytes: u32,
    /// Emergencies the device sent while it was read.
    pub emergencies: Vec<super::Emergency>,
}

fn u8_of(b: &[u8], what: &str, position: u16) -> std::result::Result<u8, CoeError> {
    match b {
        [v, ..] => Ok(*v),
        [] => Err(CoeError::Malformed {
            position,
            what: what.into(),
            why: "no data".into(),
        }),
    }
}

fn le(b: &[u8], n: usize, what: &str, position: u16) -> std::result::Result<u32, CoeError> {
    if b.len() < n {
        return Err(CoeError::Malformed {
            position,
            what: what.into(),
            why: format!("{} bytes, expected {n}", b.len()),
        });
    }
    let mut v = [0u8; 4];
    v[..n].copy_from_slice(&b[..n]);
    Ok(u32::from_le_bytes(v))
}

/// Whether `index:00` is writable in PRE-OP, if SDO information says.
fn writable(c: &mut BusClient<'_>, info: bool, index: u16) -> Option<bool> {
    if !info {
        return None;
    }
    c.entry_description(index, 0)
        .ok()
        .map(|e| e.access & 0x08 != 0)
}

/// The name SDO information gives `index:sub`: the entry's, or for a variable's subindex 0 (whose
/// entry devices often leave unnamed) the object's. `None` when the device describes neither.
pub fn entry_name(c: &mut BusClient<'_>, index: u16, sub: u8) -> Option<String> {
    let named = |n: String| (!n.is_empty()).then_some(n);
    if let Some(n) = c
        .entry_description(index, sub)
        .ok()
        .and_then(|e| named(e.name))
    {
        return Some(n);
    }
    if sub == 0 {
        return c
            .object_description(index)
            .ok()
            .filter(|o| o.object_code == 7)
            .and_then(|o| named(o.name));
    }
    None
}

/// Read every subdevice's assignment and mapping: CoE objects 0x1C10 + n for each
/// process-data SM n of the SII and the PDOs they list, with names from SDO information
/// when the device has it (else the SII's); the SII's fixed PDOs for devices without CoE.
pub fn read_mappings(seg: &PreOp<'_>) -> Result<Vec<DeviceMapping>> {
    let mut out = Vec::new();
    for d in &seg.devices {
        let mut m = DeviceMapping {
            position: d.position,
            name: d.name.clone(),
            alias: d.alias,
            identity: d.identity,
            coe: d.coe(),
            sdo_info: d.sdo_info(),
            assignments: Vec::new(),
            pdos: Vec::new(),
            input_bytes: 0,
            output_bytes: 0,
            emergencies: Vec::new(),
        };
        if !m.coe {
            for p in SubdeviceSource::pdos_from_sii(&d.sii) {
                let bits: u32 = p.entries.iter().map(|e| u32::from(e.2)).sum();
                match m.assignments.iter_mut().find(|s| s.sm == p.sync_manager) {
                    Some(s) => {
                        s.pdos.push(p.index);
                        s.bits += bits;
                    }
                    None => m.assignments.push(SmAssignment {
                        sm: p.sync_manager,
                        direction: p.direction,
                        object: 0x1c10 + u16::from(p.sync_manager),
                        pdos: vec![p.index],
                        writable: Some(false),
                        bits,
                    }),
                }
                m.pdos.push(PdoMapping {
                    index: p.index,
                    name: p.name,
                    direction: p.direction,
                    writable: Some(false),
                    entries: p
                        .entries
                        .into_iter()
                        .map(|(index, sub, bits, name, _)| MapEntry {
                            index,
                            sub,
                            bits,
                            name,
                        })
                        .collect(),
                });
            }
            for a in &m.assignments {
                match a.direction {
                    Direction::Inputs => m.input_bytes += a.bits.div_ceil(8),
                    Direction::Outputs => m.output_bytes += a.bits.div_ceil(8),
                }
            }
            out.push(m);
            continue;
        }
        let mut c = seg.client(u32::from(d.position))?;
        let pos = d.position;
        for (n, sm) in d.sii.sync_managers.iter().enumerate() {
            let direction = match sm.usage {
                SmUsage::Outputs => Direction::Outputs,
                SmUsage::Inputs => Direction::Inputs,
                _ => continue,
            };
            let object = 0x1c10 + n as u16;
            let what = format!("SDO {object:#06x}:00");
            let count = u8_of(&c.upload(object, 0)?, &what, pos)?;
            let mut a = SmAssignment {
                sm: n as u8,
                direction,
                object,
                pdos: Vec::new(),
                writable: writable(&mut c, m.sdo_info, object),
                bits: 0,
            };
            for i in 1..=count {
                let what = format!("SDO {object:#06x}:{i:02x}");
                let pdo = le(&c.upload(object, i)?, 2, &what, pos)? as u16;
                a.pdos.push(pdo);
                let what = format!("SDO {pdo:#06x}:00");
                let entries = u8_of(&c.upload(pdo, 0)?, &what, pos)?;
                let mut p = PdoMapping {
                    index: pdo,
                    name: None,
                    direction,
                    writable: writable(&mut c, m.sdo_info, pdo),
                    entries: Vec::new(),
                };
                for k in 1..=entries {
                    let what = format!("SDO {pdo:#06x}:{k:02x}");
                    let v = le(&c.upload(pdo, k)?, 4, &what, pos)?;
                    let (index, sub, bits) = ((v >> 16) as u16, (v >> 8) as u8, v as u8);
                    a.bits += u32::from(bits);
                    let name = if index == 0 {
                        None
                    } else {
                        m.sdo_info
                            .then(|| entry_name(&mut c, index, sub))
                            .flatten()
                            .or_else(|| SubdeviceSource::describe_from_sii(&d.sii, index, sub).0)
                    };
                    p.entries.push(MapEntry {
                        index,
                        sub,
                        bits,
                        name,
                    });
                }
                p.name = m
                    .sdo_info
                    .then(|| c.object_description(pdo).ok().map(|o| o.name))
                    .flatten()
                    .filter(|n| !n.is_empty())
                    .or_else(|| {
                        d.sii
                            .pdos
                            .iter()
                            .find(|x| x.index == pdo)
                            .and_then(|x| x.name.clone())
                    });
                m.pdos.push(p);
            }
            match direction {
                Direction::Inputs => m.input_bytes += a.bits.div_ceil(8),
                Direction::Outputs => m.output_bytes += a.bits.div_ceil(8),
            }
            m.assignments.push(a);
        }
        m.emergencies = c.take_emergencies();
        out.push(m);
    }
    Ok(out)
}

/// One object of `rtcat sdo list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ObjectInfo {
    /// The object description.
    #[serde(flatten)]
    pub object: super::ObjectDescription,
    /// Its entries (subindex 0..=max), when asked for; entries the device refuses to describe
    /// are left out.
    pub entries: Vec<super::EntryDescription>,
}

/// The object dictionary of the subdevice at `position` by SDO information: every object's
/// description, and with `entries` every subindex's.
pub fn list_objects(seg: &PreOp<'_>, position: u32, entries: bool) -> Result<Vec<ObjectInfo>> {
    let mut c = seg.client(position)?;
    let list = c.od_list(ListType::All)?;
    let mut out = Vec::with_capacity(list.len());
    for index in list {
        let object = c.object_description(index)?;
        let mut es = Vec::new();
        if entries {
            for sub in 0..=object.max_sub {
                match c.entry_description(index, sub) {
                    Ok(e) => es.push(e),
                    // A gap in a record (subindex not there) is not an error of the listing.
                    Err(CoeError::Abort { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        out.push(ObjectInfo {
            object,
            entries: es,
        });
    }
    Ok(out)
}
