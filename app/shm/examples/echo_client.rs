//! A client program of a running master's shared process image: it owns one output entry,
//! drives it with a counter, and reads one input entry back.
//!
//! ```text
//! rtcat bench --sim --shm demo --control /tmp/rtcat-demo.sock --duration 30 &
//! cargo run -p rtcat-shm --example echo_client -- /tmp/rtcat-demo.sock
//! ```
//!
//! Arguments: `SOCKET [OUTPUT [INPUT [SECONDS]]]` (the master's control socket), by default the reference segment's
//! `0:Outputs.Output 1` and `0:Inputs.Input 2` for 3 s. The simulated segment echoes every
//! output byte into its inputs XOR 0x5a (`ecsim::pdi`), so Input 2 reads Output 1 ^ 0x5a5a5a5a:
//! the example says when it saw its own value come back. Exit 0 when it did, 1 when it did
//! not, 2 for bad arguments.

use rtcat_shm::{Client, Error, State, Value};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The uid the master runs as: `RTCAT_MASTER_UID`, else ours. A control socket whose peer runs
/// as any other uid is refused (it is not the master).
fn master_uid() -> u32 {
    std::env::var("RTCAT_MASTER_UID")
        .ok()
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| nix::unistd::geteuid().as_raw())
}

fn attach(name: &str, wait: Duration) -> Result<Client, Error> {
    let end = Instant::now() + wait;
    loop {
        match Client::attach_owned_by(name, master_uid()) {
            Ok(c) if c.state() == State::Live => return Ok(c),
            Ok(_) | Err(Error::Sys { .. } | Error::NotPublished { .. } | Error::Refused { .. })
                if Instant::now() < end =>
            {
                std::thread::sleep(Duration::from_millis(50))
            }
            Ok(c) => return Ok(c),
            Err(e) => return Err(e),
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(name) = args.first() else {
        eprintln!("usage: echo_client SOCKET [OUTPUT [INPUT [SECONDS]]]");
        return ExitCode::from(2);
    };
    let output = args.get(1).map_or("0:Outputs.Output 1", String::as_str);
    let input = args.get(2).map_or("0:Inputs.Input 2", String::as_str);
    let secs: f64 = match args.get(3).map(|s| s.parse()) {
        None => 3.0,
        Some(Ok(s)) if s > 0.0 => s,
        Some(_) => {
            eprintln!("echo_client: SECONDS {:?}: not a positive number", args[3]);
            return ExitCode::from(2);
        }
    };
    let run = || -> Result<bool, Error> {
        let mut client = attach(name, Duration::from_secs(10))?;
        let (out, inp) = (client.entry(output)?, client.entry(input)?);
        let mut writer = client.attach_writer("echo-example")?;
        writer.claim(&out)?;
        let start = Instant::now();
        let mut value: u64 = 0x1000;
        let mut echoed = 0u64;
        let mut last_seq = 0;
        while start.elapsed().as_secs_f64() < secs {
            let snap = match client.snapshot() {
                Ok(s) => s,
                Err(Error::Gone { .. }) => {
                    // The master re-initialised with another layout: attach again.
                    drop(writer);
                    client.reattach()?;
                    writer = client.attach_writer("echo-example")?;
                    writer.claim(&client.entry(output)?)?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if snap.seq != last_seq {
                last_seq = snap.seq;
                let got = snap.raw(&inp);
                if got == (value ^ 0x5a5a_5a5a) & ((1u64 << inp.bits.min(63)) - 1) {
                    echoed += 1;
                    if echoed == 1 {
                        println!(
                            "cycle {}: {} = {:#x} echoes {} = {:#x}",
                            snap.cycle, inp.name, got, out.name, value
                        );
                    }
                    value += 1;
                }
                writer.write(&[(&out, Value::Unsigned(value))])?;
            }
            writer.heartbeat();
            std::thread::sleep(Duration::from_micros(200));
        }
        println!("{echoed} values echoed in {secs} s");
        Ok(echoed > 0)
    };
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("echo_client: {e}");
            ExitCode::from(1)
        }
    }
}
