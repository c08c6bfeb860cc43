//! The AF_XDP link over veth (`[bus] link = "xdp"`, `rtcat bench --link xdp`): the link on its
//! own (only EtherCAT frames reach the socket, everything else the stack; frames sent padded;
//! a second master refused with the reason and the fallback; nothing left on the interface
//! after the socket is dropped), then the bench against the simulator in both XDP modes, a
//! master killed mid-run whose successor attaches afresh, and a link pull recovered. Root only (network namespaces,
//! CAP_BPF); skipped with the reason otherwise.
//!
//! veth has native XDP (Linux ≥ 4.19): the program on the master's end sees the frames the
//! simulator's packet socket sends without any program on the peer. (A program on the peer is
//! needed only for frames *redirected into* a veth, XDP_TX/ndo_xdp_xmit, which this link does
//! not do: its TX ring goes through the driver's ordinary transmit in copy mode.)

use ecsim::netns::{VethPair, root_or_skip};
use rtcat_packet::xdp::{XdpMode, XdpOptions, XdpSocket};
use rtcat_packet::{Link, PacketKind, PacketSocket, floor};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtcat");

// Each test runs busy processes: one at a time on two cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[path = "support/sim_proc.rs"]
mod sim_proc;
use sim_proc::SimProc as Sim;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{ALLOCS, TRACK};
use std::sync::atomic::Ordering;

/// `ip -d link show` of the master's end: which XDP program is attached, if any.
fn xdp_state(net: &VethPair) -> String {
    let o = Command::new("ip")
        .args(["-n", &net.master_ns, "link", "show", "dev", &net.master_if])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// An EtherCAT-typed frame of `len` bytes carrying `tag`.
fn ecat_frame(len: usize, tag: u8) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].fill(0xff);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, tag]);
    f[12..14].copy_from_slice(&rtcat_packet::ETHERCAT_ETHERTYPE.to_be_bytes());
    f[14] = tag;
    f
}

#[test]
fn xdp_link_takes_ethercat_frames_only_and_leaves_nothing_behind() {
    if !root_or_skip("xdp_link_over_veth") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let net = VethPair::create("rtcxl").unwrap();
    let (mif, sif) = (net.master_if.clone(), net.segment_if.clone());

    // The segment's side: listen for what the master sends, then send one EtherCAT frame and
    // one floor ping towards the master.
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let seg = VethPair::in_ns(&net.segment_ns, move || {
        let ecat = PacketSocket::open(&sif).unwrap();
        let ping = PacketSocket::open_ethertype(&sif, floor::ETHERTYPE).unwrap();
        ready_tx.send(()).unwrap();
        let mut buf = [0u8; 1514];
        // Wait for the master's frame (tag 0x11), padded to 60 bytes.
        let end = Instant::now() + Duration::from_secs(5);
        let mut got = None;
        while Instant::now() < end && got.is_none() {
            ecat.wait_readable(Some(Duration::from_millis(50))).unwrap();
            while let Some((n, kind)) = ecat.recv(&mut buf).unwrap() {
                if kind == PacketKind::Incoming && buf[14] == 0x11 {
                    got = Some(buf[..n].to_vec());
                }
            }
        }
        let mut p = [0u8; 60];
        floor::write_ping(&mut p, 42);
        ping.send(&p).unwrap();
        for tag in 0x22..0x26 {
            ecat.send(&ecat_frame(60, tag)).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        got
    })
    .unwrap();
    ready.recv().unwrap();

    let net_state = xdp_state(&net);
    assert!(!net_state.contains("xdp"), "no program before: {net_state}");
    let h = VethPair::in_ns(&net.master_ns, move || {
        let mut x = XdpSocket::open(&mif, XdpOptions::default()).unwrap();
        let described = x.describe();
        // Another master on the same interface: refused, with the reason and the fallback.
        let second = XdpSocket::open(&mif, XdpOptions::default())
            .unwrap_err()
            .to_string();
        // The stack's sockets on the master's side: the ping must reach them, the EtherCAT
        // frame must not (the program redirected it).
        let stack_ecat = PacketSocket::open(&mif).unwrap();
        let stack_ping = PacketSocket::open_ethertype(&mif, floor::ETHERTYPE).unwrap();
        // A runt, sent padded. The link's send, wait and recv (the cycle path) are counted
        // for allocations: none allowed.
        let runt = ecat_frame(30, 0x11);
        let mut buf = [0u8; 1514];
        let allocs = ALLOCS.load(Ordering::Relaxed);
        TRACK.with(|t| t.set(true));
        let sent = Link::send(&mut x, &runt);
        let nothing_yet = x.recv(&mut buf);
        TRACK.with(|t| t.set(false));
        sent.unwrap();
        nothing_yet.unwrap();
        let end = Instant::now() + Duration::from_secs(3);
        let mut via_xdp = vec![];
        while Instant::now() < end && via_xdp.len() < 4 {
            TRACK.with(|t| t.set(true));
            let w = x.wait(Duration::from_millis(50), None);
            let r = x.recv(&mut buf);
            TRACK.with(|t| t.set(false));
            w.unwrap();
            if let Some(n) = r.unwrap() {
                via_xdp.push(buf[..n].to_vec());
            }
        }
        let allocs = ALLOCS.load(Ordering::Relaxed) - allocs;
        std::thread::sleep(Duration::from_millis(100));
        let mut pings = 0;
        while let Some((_, k)) = stack_ping.recv(&mut buf).unwrap() {
            pings += u32::from(k == PacketKind::Incoming);
        }
        let mut ecat_on_stack = 0;
        while let Some((_, k)) = stack_ecat.recv(&mut buf).unwrap() {
            ecat_on_stack += u32::from(k == PacketKind::Incoming);
        }
        (described, second, via_xdp, pings, ecat_on_stack, x, allocs)
    })
    .unwrap();
    let (described, second, via_xdp, pings, ecat_on_stack, x, allocs) = h.join().unwrap();
    assert_eq!(allocs, 0, "the link's send/wait/recv allocated");
    let sent = seg
        .join()
        .unwrap()
        .expect("the segment got the master's frame");
    eprintln!("{described}");
    // veth: native XDP, copy mode (veth has no zero-copy AF_XDP).
    assert!(described.contains("native, copy"), "{described}");
    assert!(
        second.contains("already in use") && second.contains("[bus] link = \"packet\""),
        "{second}"
    );
    assert_eq!(sent.len(), 60, "padded to the Ethernet minimum");
    assert_eq!(sent[..30], ecat_frame(30, 0x11)[..]);
    assert!(sent[30..].iter().all(|&b| b == 0));
    // Every EtherCAT frame the socket got is one the segment sent, whole and in order. On
    // veth the first one after the attachment is sometimes lost (2 runs of 5 when another
    // test ran before in the process; the socket's XDP_STATISTICS count no drop): the master
    // sees a lost frame, which ethercrab retries. The others all arrive.
    let tags: Vec<u8> = via_xdp.iter().map(|f| f[14]).collect();
    assert!(
        tags.len() >= 3 && tags.windows(2).all(|w| w[0] < w[1]) && tags.last() == Some(&0x25),
        "EtherCAT frames through AF_XDP: {tags:x?}"
    );
    for f in &via_xdp {
        assert_eq!(*f, ecat_frame(60, f[14]));
    }
    assert_eq!(pings, 1, "the floor ping went on to the stack");
    assert_eq!(
        ecat_on_stack, 0,
        "the EtherCAT frame went to the AF_XDP socket only"
    );
    let attached = xdp_state(&net);
    assert!(attached.contains("prog/xdp id"), "{attached}");
    drop(x);
    let after = xdp_state(&net);
    assert!(!after.contains("prog/xdp"), "detached on drop: {after}");

    // Generic mode by request, on the same interface once the native program is gone.
    let mif = net.master_if.clone();
    let d = VethPair::in_ns(&net.master_ns, move || {
        let opt = XdpOptions {
            mode: XdpMode::Generic,
            queue: 0,
        };
        XdpSocket::open(&mif, opt).map(|x| x.describe())
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap();
    assert!(d.contains("generic, copy"), "{d}");
    // A queue veth does not have: the step and the fallback named.
    let mif = net.master_if.clone();
    let e = VethPair::in_ns(&net.master_ns, move || {
        let opt = XdpOptions {
            mode: XdpMode::Auto,
            queue: 7,
        };
        XdpSocket::open(&mif, opt).map(|x| x.describe())
    })
    .unwrap()
    .join()
    .unwrap()
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("binding to queue 7") && e.contains("link = \"packet\""),
        "{e}"
    );
}

fn bench(net: &VethPair, out: &Path, link: &str, secs: &str) -> Command {
    let mut c = net.master_cmd(BIN);
    c.args(["bench", "--iface", &net.master_if, "--link", link])
        .args(["--check-echo", "--duration", secs, "--period-us", "1000"])
        .arg("--out")
        .arg(out);
    c
}

/// One clean bench over AF_XDP: correctness asserted, lost frames the machine's verdict.
fn clean_xdp_bench(net: &VethPair, dir: &Path, link: &str) -> Result<(), String> {
    let out = dir.join(format!("out-{link}"));
    let o = bench(net, &out, link, "3").output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    ecsim::noise::exited_ok(&format!("rtcat bench --link {link}"), o.status, &stderr)?;
    let s = rtcat_results::Summary::read(&out.join("summary.json")).unwrap();
    assert_eq!(s.wkc.expected, Some(9), "{link}");
    assert!(s.cycles > 2000, "{link}: {}", s.cycles);
    assert_eq!(s.wkc.mismatches, 0, "{link}");
    let txt = std::fs::read_to_string(out.join("summary.txt")).unwrap();
    assert!(txt.contains("data errors 0"), "{link}: {txt}");
    assert!(s.rtt_ns.unwrap().p50 > 0);
    ecsim::noise::ensure(s.frames_lost * 100 < s.cycles, || {
        format!("{link}: {} lost of {}", s.frames_lost, s.cycles)
    })
}

#[test]
fn bench_over_xdp_is_clean_recovers_a_link_pull_and_a_kill_leaves_nothing() {
    if !root_or_skip("bench_over_xdp") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let net = VethPair::create("rtcxb").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::start(Path::new(BIN), &net, &dir.path().join("sim.sock"));

    // A master killed while cycling: the kernel detaches its program with its last fd.
    let mut child = bench(&net, &dir.path().join("killed"), "xdp", "30")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !xdp_state(&net).contains("prog/xdp") {
        assert!(t.elapsed() < Duration::from_secs(10), "never attached");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();
    let t = Instant::now();
    while xdp_state(&net).contains("prog/xdp") {
        // The link's release can lag the exit by an RCU grace period.
        assert!(t.elapsed() < Duration::from_secs(5), "{}", xdp_state(&net));
        std::thread::sleep(Duration::from_millis(20));
    }

    for link in ["xdp", "xdp-generic"] {
        ecsim::noise::within_machine_noise(&format!("bench over AF_XDP ({link})"), |_| {
            clean_xdp_bench(&net, dir.path(), link)
        });
    }
    let st = sim.ctl("status");
    assert!(st.contains(" runts=0 "), "{st}");
    assert!(!xdp_state(&net).contains("prog/xdp"));

    // A link pull over AF_XDP is recovered as over AF_PACKET (veth.rs): the socket and the
    // program stay, the segment comes back, the run ends cleanly.
    let out = dir.path().join("pulled");
    let log = dir.path().join("pulled.stderr");
    let mut child = bench(&net, &out, "xdp", "6")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    net.set_segment_link(false).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    net.set_segment_link(true).unwrap();
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "{status}: {stderr}");
    let s = rtcat_results::Summary::read(&out.join("summary.json")).unwrap();
    let ev = std::fs::read_to_string(out.join("events.log")).unwrap();
    assert!(s.recoveries >= 1, "{} recoveries\n{ev}", s.recoveries);
    assert!(ev.contains("shutdown outputs=0 segment=INIT"), "{ev}");
    assert!(!xdp_state(&net).contains("prog/xdp"));
}
