//! The ESI reader: roxmltree's DOM walked element by element (ETG.2000 names), every value
//! checked, every error with the element path and the line.

use crate::text;
use crate::*;
use roxmltree::{Document, Node, ParsingOptions};

/// A number as ESI files write them: decimal, `#x1A00` / `#X1A00` (the ETG.2000 `HexDecValue`
/// form) or `0x1A00`; surrounding blanks are ignored.
pub fn parse_number(s: &str) -> Option<u64> {
    let t = s.trim();
    let hex = t
        .strip_prefix("#x")
        .or_else(|| t.strip_prefix("#X"))
        .or_else(|| t.strip_prefix("0x"))
        .or_else(|| t.strip_prefix("0X"));
    match hex {
        // from_str_radix takes a leading '+': "#x+1" is not a number in any ESI.
        Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(h, 16).ok()
        }
        Some(_) => None,
        None if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => t.parse().ok(),
        None => None,
    }
}

/// Parse an ESI file from its bytes; `file` names it in errors.
pub fn parse(bytes: &[u8], file: &str) -> Result<EsiFile, Error> {
    with_document(bytes, file, |p| p.file())
}

/// Decode `bytes`, apply the bounds every description file gets (attributes per element, nodes,
/// no DTD) and hand the DOM to `f`: the one entry of the ESI and the ENI reader.
pub(crate) fn with_document<T>(
    bytes: &[u8],
    file: &str,
    f: impl for<'a, 'i> FnOnce(&P<'a, 'i>) -> R<T>,
) -> R<T> {
    let text = text::decode(bytes).map_err(|e| Error::Encoding {
        file: file.to_string(),
        line: text::line_of(bytes, e.offset),
        why: e.why,
    })?;
    if let Some((offset, name)) = too_many_attributes(&text) {
        return Err(Error::Invalid {
            file: file.to_string(),
            line: text::line_of(text.as_bytes(), offset),
            path: name,
            why: format!(
                "more than {MAX_ATTRIBUTES} attributes on one element (a description file's \
                 element has a handful)"
            ),
        });
    }
    if let Some((offset, name)) = too_deep(&text) {
        return Err(Error::Invalid {
            file: file.to_string(),
            line: text::line_of(text.as_bytes(), offset),
            path: name,
            why: format!(
                "elements nest deeper than {MAX_DEPTH} levels (a description file nests about \
                 ten)"
            ),
        });
    }
    let opt = ParsingOptions {
        allow_dtd: false,
        // About one node per 8 bytes is far denser than any real ESI (indented elements with
        // text); the bound keeps a pathological file of empty tags from costing gigabytes.
        nodes_limit: u32::try_from(MAX_FILE_BYTES / 8).unwrap_or(u32::MAX),
        ..ParsingOptions::default()
    };
    let doc = Document::parse_with_options(&text, opt).map_err(|e| Error::Xml {
        file: file.to_string(),
        line: e.pos().row,
        why: e.to_string(),
    })?;
    // roxmltree's text_pos_at scans from the start of the text on every call: with a line per
    // device and per PDO that is quadratic in a vendor file of many megabytes. The offsets of the
    // line starts, once, make every lookup a binary search.
    let newlines: Vec<usize> = text
        .bytes()
        .enumerate()
        .filter_map(|(i, b)| (b == b'\n').then_some(i))
        .collect();
    f(&P {
        file,
        doc: &doc,
        newlines,
        warnings: Default::default(),
    })
}

/// Deepest element nesting accepted. ESI and ENI files nest about ten levels (ENI:
/// `EtherCATConfig/Config/Slave/ProcessData/RxPdo/Entry/Index`); the bound keeps the element
/// paths of errors, and every walk up the ancestors, short.
pub const MAX_DEPTH: usize = 64;

/// The offset and name of the first start tag nested deeper than [`MAX_DEPTH`]. One pass;
/// what it does not understand is left to the XML parser.
fn too_deep(text: &str) -> Option<(usize, String)> {
    let b = text.as_bytes();
    let skip_past = |from: usize, end: &str| text[from..].find(end).map(|k| from + k + end.len());
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(k) = text[i..].find('<') {
        let start = i + k;
        let rest = &text[start..];
        if rest.starts_with("<!--") {
            i = skip_past(start + 4, "-->")?;
        } else if rest.starts_with("<![CDATA[") {
            i = skip_past(start + 9, "]]>")?;
        } else if rest.starts_with("<?") || rest.starts_with("<!") {
            i = skip_past(start + 2, ">")?;
        } else if rest.starts_with("</") {
            depth = depth.saturating_sub(1);
            i = skip_past(start + 2, ">")?;
        } else {
            // A start tag: skip its attributes (a quoted value may hold '>').
            let mut j = start + 1;
            let mut quote = None;
            while j < b.len() {
                match (quote, b[j]) {
                    (None, b'"' | b'\'') => quote = Some(b[j]),
                    (Some(q), c) if c == q => quote = None,
                    (None, b'>') => break,
                    _ => {}
                }
                j += 1;
            }
            if j >= b.len() {
                return None;
            }
            if b[j - 1] != b'/' {
                depth += 1;
                if depth > MAX_DEPTH {
                    let name: String = text[start + 1..j]
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != '/')
                        .take(64)
                        .collect();
                    return Some((start, format!("<{name}>")));
                }
            }
            i = j + 1;
        }
    }
    None
}

/// Most attributes one element may have. roxmltree checks every attribute of an element
/// against the ones before it (quadratic: 80 000 attributes in 0.87 MB took minutes); real ESI
/// elements have at most a few, so a linear scan refuses more first.
pub const MAX_ATTRIBUTES: usize = 256;

/// The offset and name of the first start tag with more than [`MAX_ATTRIBUTES`] attributes.
/// One pass over the text; anything it does not understand is left to the XML parser, which
/// reports it.
fn too_many_attributes(text: &str) -> Option<(usize, String)> {
    let b = text.as_bytes();
    let skip_past = |from: usize, end: &str| text[from..].find(end).map(|k| from + k + end.len());
    let mut i = 0;
    while let Some(k) = text[i..].find('<') {
        let start = i + k;
        let rest = &text[start..];
        if rest.starts_with("<!--") {
            i = skip_past(start + 4, "-->")?;
            continue;
        }
        if rest.starts_with("<![CDATA[") {
            i = skip_past(start + 9, "]]>")?;
            continue;
        }
        if rest.starts_with("<?") {
            i = skip_past(start + 2, "?>")?;
            continue;
        }
        if rest.starts_with("<!") || rest.starts_with("</") {
            i = skip_past(start + 2, ">")?;
            continue;
        }
        // A start tag: its name, then attributes `name = "value"` up to `>` or `/>`.
        let mut j = start + 1;
        while j < b.len() && !b[j].is_ascii_whitespace() && b[j] != b'>' && b[j] != b'/' {
            j += 1;
        }
        let name = &text[start + 1..j];
        let mut count = 0usize;
        loop {
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            match b.get(j) {
                None => return None,
                Some(b'>') | Some(b'/') => break,
                Some(_) => {}
            }
            // The attribute's name and `=`, then its quoted value.
            while j < b.len() && b[j] != b'=' && b[j] != b'>' {
                j += 1;
            }
            j += 1;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            let q = *b.get(j)?;
            if q != b'"' && q != b'\'' {
                break;
            }
            j = j + 1 + text[j + 1..].find(q as char)? + 1;
            count += 1;
            if count > MAX_ATTRIBUTES {
                let name: String = name.chars().take(64).collect();
                return Some((start, format!("<{name}>")));
            }
        }
        i = j.max(start + 1);
    }
    None
}

pub(crate) struct P<'a, 'i> {
    pub(crate) file: &'a str,
    pub(crate) doc: &'a Document<'i>,
    /// Byte offsets of the text's `\n`s, in order.
    newlines: Vec<usize>,
    /// Repairs made so far (see [`Warning`]).
    warnings: std::cell::RefCell<Vec<Warning>>,
}

pub(crate) type R<T> = Result<T, Error>;

pub(crate) fn children<'a, 'i>(
    node: Node<'a, 'i>,
    name: &'static str,
) -> impl Iterator<Item = Node<'a, 'i>> {
    node.children()
        .filter(move |c| c.is_element() && c.tag_name().name() == name)
}

pub(crate) fn child<'a, 'i>(node: Node<'a, 'i>, name: &'static str) -> Option<Node<'a, 'i>> {
    children(node, name).next()
}

/// The element's text (all its text and CDATA children), trimmed.
pub(crate) fn text_of(node: Node) -> String {
    let mut s = String::new();
    for c in node.children().filter(|c| c.is_text()) {
        s.push_str(c.text().unwrap_or(""));
    }
    s.trim().to_string()
}

/// The element path shown in errors: up to the enclosing `Device`/`Module` (an ENI's `Slave`),
/// else from the root's child (`Vendor/Id`).
pub(crate) fn path_of(node: Node) -> String {
    let mut parts = Vec::new();
    for a in node.ancestors().filter(|a| a.is_element()) {
        let name = a.tag_name().name();
        let is_root = a.parent().is_some_and(|p| p.is_root());
        if is_root && !parts.is_empty() {
            break;
        }
        parts.push(name);
        if name == "Device" || name == "Module" || name == "Slave" {
            break;
        }
    }
    parts.reverse();
    parts.join("/")
}

/// A value as an error shows it: quoted, at most 64 characters (a hostile file's "number" may
/// be megabytes long).
pub(crate) fn shown(t: &str) -> String {
    const MAX: usize = 64;
    match t.char_indices().nth(MAX) {
        None => format!("{t:?}"),
        Some((end, _)) => format!("{:?}... ({} bytes)", &t[..end], t.len()),
    }
}

fn limit_name(max: u64) -> &'static str {
    match max {
        0xFF => "8-bit",
        0xFFFF => "16-bit",
        0xFFFF_FFFF => "32-bit",
        _ => "64-bit",
    }
}

impl<'a, 'i> P<'a, 'i> {
    /// 1-based line of a byte offset of the text.
    pub(crate) fn line(&self, pos: usize) -> u32 {
        let before = self.newlines.partition_point(|&n| n < pos);
        u32::try_from(before).unwrap_or(u32::MAX).saturating_add(1)
    }

    pub(crate) fn invalid(&self, node: Node, why: impl Into<String>) -> Error {
        Error::Invalid {
            file: self.file.to_string(),
            line: self.line(node.range().start),
            path: path_of(node),
            why: why.into(),
        }
    }

    pub(crate) fn invalid_attr(&self, node: Node, attr: &str, why: impl Into<String>) -> Error {
        let pos = node
            .attributes()
            .find(|a| a.name() == attr)
            .map(|a| a.range().start)
            .unwrap_or(node.range().start);
        Error::Invalid {
            file: self.file.to_string(),
            line: self.line(pos),
            path: format!("{}@{attr}", path_of(node)),
            why: why.into(),
        }
    }

    pub(crate) fn req(&self, node: Node<'a, 'i>, name: &'static str) -> R<Node<'a, 'i>> {
        child(node, name).ok_or_else(|| Error::Invalid {
            file: self.file.to_string(),
            line: self.line(node.range().start),
            path: format!("{}/{name}", path_of(node)),
            why: "missing".into(),
        })
    }

    pub(crate) fn number(&self, node: Node, max: u64) -> R<u64> {
        let t = text_of(node);
        match parse_number(&t) {
            None => Err(self.invalid(node, format!("{} is not a number", shown(&t)))),
            Some(v) if v > max => Err(self.invalid(
                node,
                format!("{t} is out of range for a {} value", limit_name(max)),
            )),
            Some(v) => Ok(v),
        }
    }

    pub(crate) fn req_number(&self, node: Node<'a, 'i>, name: &'static str, max: u64) -> R<u64> {
        let c = self.req(node, name)?;
        self.number(c, max)
    }

    /// An optional numeric child; an empty element (`<SubIndex/>`, seen in padding entries)
    /// counts as absent.
    pub(crate) fn opt_number(
        &self,
        node: Node<'a, 'i>,
        name: &'static str,
        max: u64,
    ) -> R<Option<u64>> {
        child(node, name)
            .filter(|c| !text_of(*c).is_empty())
            .map(|c| self.number(c, max))
            .transpose()
    }

    /// `Sm@Enable`: ETG.2000 types it as a number (0/1), some files write a boolean; any
    /// non-zero number is enabled, absent is disabled.
    fn attr_enable(&self, sm: Node) -> R<bool> {
        match sm.attribute("Enable").map(str::trim) {
            Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
            _ => Ok(self.attr_number(sm, "Enable", 0xFF)?.unwrap_or(0) != 0),
        }
    }

    pub(crate) fn attr_number(&self, node: Node, attr: &str, max: u64) -> R<Option<u64>> {
        let Some(v) = node.attribute(attr) else {
            return Ok(None);
        };
        match parse_number(v) {
            None => Err(self.invalid_attr(node, attr, format!("{} is not a number", shown(v)))),
            Some(n) if n > max => Err(self.invalid_attr(
                node,
                attr,
                format!("{v} is out of range for a {} value", limit_name(max)),
            )),
            Some(n) => Ok(Some(n)),
        }
    }

    /// An `xs:boolean` attribute (`true`/`false`/`1`/`0`); absent is false.
    pub(crate) fn attr_bool(&self, node: Node, attr: &str) -> R<bool> {
        match node.attribute(attr).map(str::trim) {
            None => Ok(false),
            Some(v) if v == "1" || v.eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v == "0" || v.eq_ignore_ascii_case("false") || v.is_empty() => Ok(false),
            Some(v) => Err(self.invalid_attr(
                node,
                attr,
                format!("{} is not a boolean (true, false, 1 or 0)", shown(v)),
            )),
        }
    }

    pub(crate) fn names(&self, node: Node) -> R<Vec<LocalName>> {
        children(node, "Name")
            .map(|n| {
                Ok(LocalName {
                    lcid: self
                        .attr_number(n, "LcId", u64::from(u32::MAX))?
                        .map(|v| v as u32),
                    text: text_of(n),
                })
            })
            .collect()
    }

    pub(crate) fn name(&self, node: Node) -> R<String> {
        Ok(pick_name(&self.names(node)?).unwrap_or("").to_string())
    }

    fn file(&self) -> R<EsiFile> {
        let root = self.doc.root_element();
        if root.tag_name().name() == "EtherCATModule" {
            return self.module_file(root);
        }
        if root.tag_name().name() == "EtherCATConfig" {
            return Err(self.invalid(
                root,
                "this is an ENI (EtherCAT network information, root EtherCATConfig), not an ESI \
                 device description: `rtcat config from-eni` reads it",
            ));
        }
        if root.tag_name().name() != "EtherCATInfo" {
            return Err(self.invalid(
                root,
                "the root element is neither EtherCATInfo nor EtherCATModule: not an ESI file",
            ));
        }
        let v = self.req(root, "Vendor")?;
        let vendor = Vendor {
            id: self.req_number(v, "Id", u64::from(u32::MAX))? as u32,
            name: self.name(v)?,
        };
        let d = self.req(root, "Descriptions")?;
        let mut groups = Vec::new();
        for gs in children(d, "Groups") {
            for g in children(gs, "Group") {
                groups.push(Group {
                    type_name: text_of(self.req(g, "Type")?),
                    name: self.name(g)?,
                });
            }
        }
        let mut devices = Vec::new();
        let mut passive = Vec::new();
        for ds in children(d, "Devices") {
            for dev in children(ds, "Device") {
                match self.passive(dev)? {
                    Some(p) => passive.push(p),
                    None => devices.push(self.device(dev, vendor.id)?),
                }
            }
        }
        let mut modules = Vec::new();
        for ms in children(d, "Modules") {
            for m in children(ms, "Module") {
                modules.push(self.module(m)?);
            }
        }
        Ok(EsiFile {
            vendor,
            groups,
            devices,
            modules,
            passive,
            warnings: self.warnings.take(),
            references: self.references(root),
        })
    }

    /// A module description file (ETG.2000: root `EtherCATModule`, referenced from a device's
    /// file by `InfoReference`): its `Vendor` when given, and its `Modules/Module`s (also
    /// accepted under `Descriptions/Modules`). No devices.
    fn module_file(&self, root: Node<'a, 'i>) -> R<EsiFile> {
        let vendor = match child(root, "Vendor") {
            Some(v) => Vendor {
                id: self.req_number(v, "Id", u64::from(u32::MAX))? as u32,
                name: self.name(v)?,
            },
            None => Vendor {
                id: 0,
                name: String::new(),
            },
        };
        let mut modules = Vec::new();
        let lists = children(root, "Modules")
            .chain(children(root, "Descriptions").flat_map(|d| children(d, "Modules")));
        for ms in lists {
            for m in children(ms, "Module") {
                modules.push(self.module(m)?);
            }
        }
        Ok(EsiFile {
            vendor,
            groups: Vec::new(),
            devices: Vec::new(),
            modules,
            passive: Vec::new(),
            warnings: self.warnings.take(),
            references: self.references(root),
        })
    }

    /// `InfoReference` texts: under the root, or under `Descriptions` / `Descriptions/Modules`
    /// (where vendor files put them), in order.
    fn references(&self, root: Node<'a, 'i>) -> Vec<Reference> {
        let mut v = Vec::new();
        let mut take = |n: Node<'a, 'i>| {
            for r in children(n, "InfoReference") {
                v.push(Reference {
                    file: text_of(r),
                    line: self.line(r.range().start),
                });
            }
        };
        take(root);
        for d in children(root, "Descriptions") {
            take(d);
            for m in children(d, "Modules") {
                take(m);
            }
        }
        v
    }

    /// A passive device: no `Type@ProductCode` and nothing an EtherCAT slave controller would
    /// hold (sync managers, FMMUs, a mailbox, PDOs). Vendor terminal libraries list their end
    /// caps and potential feeds so; a device that has any of those parts and no product code
    /// stays an error (its identity is missing, not absent).
    fn passive(&self, dev: Node<'a, 'i>) -> R<Option<PassiveDevice>> {
        let ty = self.req(dev, "Type")?;
        if ty.attribute("ProductCode").is_some() {
            return Ok(None);
        }
        let esc = ["Sm", "Fmmu", "Mailbox", "RxPdo", "TxPdo"]
            .into_iter()
            .any(|t| child(dev, t).is_some());
        if esc {
            return Err(self.invalid_attr(
                ty,
                "ProductCode",
                "missing (the device has sync managers, FMMUs, a mailbox or PDOs: it is on the \
                 bus and needs its identity)",
            ));
        }
        Ok(Some(PassiveDevice {
            name: text_of(ty),
            names: self.names(dev)?,
            group: child(dev, "GroupType").map(text_of),
            line: self.line(dev.range().start),
        }))
    }

    fn device(&self, dev: Node<'a, 'i>, vendor_id: u32) -> R<Device> {
        let ty = self.req(dev, "Type")?;
        let product_code =
            self.attr_number(ty, "ProductCode", u64::from(u32::MAX))?
                .ok_or_else(|| self.invalid_attr(ty, "ProductCode", "missing"))? as u32;
        let revision = self
            .attr_number(ty, "RevisionNo", u64::from(u32::MAX))?
            .map(|r| r as u32);
        let mut sync_managers = Vec::new();
        for sm in children(dev, "Sm") {
            sync_managers.push(Sm {
                start: self
                    .attr_number(sm, "StartAddress", 0xFFFF)?
                    .ok_or_else(|| self.invalid_attr(sm, "StartAddress", "missing"))?
                    as u16,
                default_size: self
                    .attr_number(sm, "DefaultSize", 0xFFFF)?
                    .map(|v| v as u16),
                min_size: self.attr_number(sm, "MinSize", 0xFFFF)?.map(|v| v as u16),
                max_size: self.attr_number(sm, "MaxSize", 0xFFFF)?.map(|v| v as u16),
                control_byte: self.attr_number(sm, "ControlByte", 0xFF)?.map(|v| v as u8),
                enable: self.attr_enable(sm)?,
                usage: text_of(sm),
            });
        }
        let mailbox = match child(dev, "Mailbox") {
            None => None,
            Some(mb) => {
                let protocols: Vec<String> = mb
                    .children()
                    .filter(|c| c.is_element())
                    .map(|c| c.tag_name().name().to_string())
                    .collect();
                let coe = match child(mb, "CoE") {
                    None => None,
                    Some(c) => Some(Coe {
                        sdo_info: self.attr_bool(c, "SdoInfo")?,
                        complete_access: self.attr_bool(c, "CompleteAccess")?,
                        pdo_assign: self.attr_bool(c, "PdoAssign")?,
                        pdo_config: self.attr_bool(c, "PdoConfig")?,
                        pdo_upload: self.attr_bool(c, "PdoUpload")?,
                    }),
                };
                Some(Mailbox { protocols, coe })
            }
        };
        let mut dictionary = None;
        for p in children(dev, "Profile") {
            if let Some(d) = child(p, "Dictionary") {
                dictionary = Some(self.dictionary(d)?);
                break;
            }
        }
        Ok(Device {
            name: text_of(ty),
            vendor_id,
            product_code,
            revision,
            names: self.names(dev)?,
            group: child(dev, "GroupType").map(text_of),
            sync_managers,
            fmmus: children(dev, "Fmmu").map(text_of).collect(),
            mailbox,
            rx_pdos: self.pdos(dev, "RxPdo")?,
            tx_pdos: self.pdos(dev, "TxPdo")?,
            dictionary,
            slots: child(dev, "Slots").map(|s| self.slots(s)).transpose()?,
            line: self.line(dev.range().start),
        })
    }

    fn slots(&self, s: Node<'a, 'i>) -> R<Slots> {
        let u32max = u64::from(u32::MAX);
        let mut slots = Vec::new();
        for sl in children(s, "Slot") {
            let mut module_idents = Vec::new();
            let mut default_ident = None;
            for m in children(sl, "ModuleIdent") {
                let id = self.number(m, u32max)? as u32;
                if self.attr_bool(m, "Default")? {
                    default_ident = Some(id);
                }
                module_idents.push(id);
            }
            let max_instances = self.attr_number(sl, "MaxInstances", u32max)?.unwrap_or(1) as u32;
            slots.push(Slot {
                name: self.name(sl)?,
                min_instances: self.attr_number(sl, "MinInstances", u32max)?.unwrap_or(1) as u32,
                max_instances,
                pdo_increment: self
                    .attr_number(sl, "SlotPdoIncrement", 0xFFFF)?
                    .map(|v| v as u32),
                index_increment: self
                    .attr_number(sl, "SlotIndexIncrement", 0xFFFF)?
                    .map(|v| v as u32),
                module_idents,
                default_ident,
                module_classes: children(sl, "ModuleClass").map(text_of).collect(),
                line: self.line(sl.range().start),
            });
        }
        Ok(Slots {
            max_slot_count: self
                .attr_number(s, "MaxSlotCount", u32max)?
                .map(|v| v as u32),
            pdo_increment: self
                .attr_number(s, "SlotPdoIncrement", 0xFFFF)?
                .unwrap_or(0) as u32,
            index_increment: self
                .attr_number(s, "SlotIndexIncrement", 0xFFFF)?
                .unwrap_or(0) as u32,
            slots,
        })
    }

    fn module(&self, m: Node<'a, 'i>) -> R<Module> {
        let ty = self.req(m, "Type")?;
        Ok(Module {
            name: text_of(ty),
            ident: self
                .attr_number(ty, "ModuleIdent", u64::from(u32::MAX))?
                .map(|v| v as u32),
            class: ty.attribute("ModuleClass").map(str::to_string),
            source: None,
            display_name: self.name(m)?,
            rx_pdos: self.pdos(m, "RxPdo")?,
            tx_pdos: self.pdos(m, "TxPdo")?,
        })
    }

    pub(crate) fn pdos(&self, dev: Node<'a, 'i>, tag: &'static str) -> R<Vec<Pdo>> {
        children(dev, tag).map(|p| self.pdo(p)).collect()
    }

    fn pdo(&self, p: Node<'a, 'i>) -> R<Pdo> {
        let mut excludes = Vec::new();
        for x in children(p, "Exclude") {
            excludes.push(self.number(x, 0xFFFF)? as u16);
        }
        let mut entries = Vec::new();
        for e in children(p, "Entry") {
            entries.push(Entry {
                depend_on_slot: match child(e, "Index") {
                    Some(i) => self.attr_bool(i, "DependOnSlot")?,
                    None => false,
                },
                index: self.req_number(e, "Index", 0xFFFF)? as u16,
                sub: self.opt_number(e, "SubIndex", 0xFF)?.unwrap_or(0) as u8,
                bits: self.req_number(e, "BitLen", 0xFFFF)? as u16,
                name: self.name(e)?,
                data_type: child(e, "DataType").map(text_of),
            });
        }
        Ok(Pdo {
            index: self.req_number(p, "Index", 0xFFFF)? as u16,
            name: self.name(p)?,
            fixed: self.attr_bool(p, "Fixed")?,
            mandatory: self.attr_bool(p, "Mandatory")?,
            sm: self.attr_number(p, "Sm", 0xFF)?.map(|v| v as u8),
            excludes,
            entries,
            depend_on_slot: match child(p, "Index") {
                Some(i) => self.attr_bool(i, "DependOnSlot")?,
                None => false,
            },
            line: self.line(p.range().start),
        })
    }

    fn dictionary(&self, d: Node<'a, 'i>) -> R<Dictionary> {
        let mut data_types = Vec::new();
        for dts in children(d, "DataTypes") {
            for t in children(dts, "DataType") {
                data_types.push(self.data_type(t)?);
            }
        }
        let mut objects = Vec::new();
        for os in children(d, "Objects") {
            for o in children(os, "Object") {
                objects.push(self.object(o)?);
            }
        }
        Ok(Dictionary {
            data_types,
            objects,
        })
    }

    fn data_type(&self, t: Node<'a, 'i>) -> R<DataType> {
        let array = match child(t, "ArrayInfo") {
            None => None,
            Some(a) => Some(ArrayInfo {
                lbound: self
                    .opt_number(a, "LBound", u64::from(u32::MAX))?
                    .unwrap_or(0) as u32,
                elements: self.req_number(a, "Elements", u64::from(u32::MAX))? as u32,
            }),
        };
        let mut sub_items = Vec::new();
        for s in children(t, "SubItem") {
            let (access, pdo_mapping) = self.flags(s)?;
            sub_items.push(SubItemType {
                sub_idx: self.opt_number(s, "SubIdx", 0xFF)?.map(|v| v as u8),
                name: child(s, "Name").map(text_of).unwrap_or_default(),
                type_name: text_of(self.req(s, "Type")?),
                bit_size: self.req_number(s, "BitSize", u64::from(u32::MAX))? as u32,
                bit_offset: self
                    .opt_number(s, "BitOffs", u64::from(u32::MAX))?
                    .unwrap_or(0) as u32,
                access,
                pdo_mapping,
            });
        }
        Ok(DataType {
            name: text_of(self.req(t, "Name")?),
            base_type: child(t, "BaseType").map(text_of),
            bit_size: self.req_number(t, "BitSize", u64::from(u32::MAX))? as u32,
            array,
            sub_items,
        })
    }

    fn object(&self, o: Node<'a, 'i>) -> R<Object> {
        let (access, pdo_mapping) = self.flags(o)?;
        let index = self.req_number(o, "Index", 0xFFFF)? as u16;
        let mut default = None;
        let mut sub_items = Vec::new();
        if let Some(info) = child(o, "Info") {
            default = self.default_of(info, &format!("object 0x{index:04X}"))?;
            for (k, s) in children(info, "SubItem").enumerate() {
                let what = format!("object 0x{index:04X}, SubItem {}", k + 1);
                sub_items.push(ObjectSubItem {
                    name: child(s, "Name").map(text_of).unwrap_or_default(),
                    default: match child(s, "Info") {
                        Some(i) => self.default_of(i, &what)?,
                        None => None,
                    },
                });
            }
        }
        Ok(Object {
            index,
            name: self.name(o)?,
            type_name: text_of(self.req(o, "Type")?),
            bit_size: self.req_number(o, "BitSize", u64::from(u32::MAX))? as u32,
            default,
            access,
            pdo_mapping,
            sub_items,
        })
    }

    /// `Info/DefaultData` (hex bytes), `DefaultValue` or `DefaultString`.
    /// `what` names the object (and sub-item) in a warning.
    fn default_of(&self, info: Node, what: &str) -> R<Option<DefaultValue>> {
        if let Some(d) = child(info, "DefaultData") {
            return Ok(Some(DefaultValue::Data(self.hex_data(d, what)?)));
        }
        if let Some(v) = child(info, "DefaultValue") {
            return Ok(Some(DefaultValue::Value(text_of(v))));
        }
        Ok(child(info, "DefaultString").map(|s| DefaultValue::String(text_of(s))))
    }

    /// `DefaultData`: hex, two digits per byte (ETG.2000 `hexBinary`). Vendors write a single
    /// digit for a one-byte value ("2"): that is read as "02" with a warning, since one digit
    /// can only be the low nibble of the only byte. Any other odd count (three digits, ...) is
    /// refused: the data are little-endian bytes, and whether the missing digit belongs to the
    /// first byte ("0123" = 0x2301) or the vendor wrote the number big-endian (0x0123) cannot
    /// be told, and a wrong default would be written to the device as a startup value.
    fn hex_data(&self, d: Node, what: &str) -> R<Vec<u8>> {
        let mut t: String = text_of(d).chars().filter(|c| !c.is_whitespace()).collect();
        if !t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(self.invalid(
                d,
                format!("{} is not hex data (two digits per byte)", shown(&t)),
            ));
        }
        if t.len() == 1 {
            self.warnings.borrow_mut().push(Warning {
                file: self.file.to_string(),
                line: self.line(d.range().start),
                path: path_of(d),
                why: format!("{what}: {t:?} has one hex digit: read as \"0{t}\" (one byte)"),
            });
            t.insert(0, '0');
        }
        if !t.len().is_multiple_of(2) {
            return Err(self.invalid(
                d,
                format!(
                    "{} has an odd number of hex digits ({}): which byte lacks a digit is \
                     ambiguous for data of more than one byte (write two digits per byte, \
                     little-endian)",
                    shown(&t),
                    t.len()
                ),
            ));
        }
        Ok((0..t.len())
            .step_by(2)
            .filter_map(|i| u8::from_str_radix(&t[i..i + 2], 16).ok())
            .collect())
    }

    fn flags(&self, node: Node<'a, 'i>) -> R<(Option<Access>, Option<PdoMapping>)> {
        let Some(f) = child(node, "Flags") else {
            return Ok((None, None));
        };
        let access = match child(f, "Access") {
            None => None,
            Some(a) => {
                let t = text_of(a);
                let kind = match t.to_ascii_lowercase().as_str() {
                    "ro" => AccessKind::Ro,
                    "rw" => AccessKind::Rw,
                    "wo" => AccessKind::Wo,
                    _ => {
                        return Err(self.invalid(a, format!("{} is not ro, rw or wo", shown(&t))));
                    }
                };
                Some(Access {
                    kind,
                    read_restrictions: a.attribute("ReadRestrictions").map(str::to_string),
                    write_restrictions: a.attribute("WriteRestrictions").map(str::to_string),
                })
            }
        };
        let pdo_mapping = match child(f, "PdoMapping") {
            None => None,
            Some(m) => {
                let t = text_of(m);
                match t.to_ascii_uppercase().as_str() {
                    "" => None,
                    "R" => Some(PdoMapping::R),
                    "T" => Some(PdoMapping::T),
                    "RT" | "TR" => Some(PdoMapping::RT),
                    _ => return Err(self.invalid(m, format!("{} is not R, T or RT", shown(&t)))),
                }
            }
        };
        Ok((access, pdo_mapping))
    }
}
