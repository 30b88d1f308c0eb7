//! The vendored turmoil's held connection (`sim/vendor/turmoil`, `Sim::hold_stream`): one
//! connection's segments wait, in order, while another between the same hosts flows, a release
//! of the link leaves it held, and its release delivers what it held in order, before the FIN
//! of a side that closed meanwhile; and `Sim::reset_stream` resets one side only.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turmoil::net::{TcpListener, TcpStream};

/// What the server read, per connection (by the client's port), with the step it arrived at;
/// `None` for the end of the stream.
type Seen = Rc<RefCell<Vec<(u16, Option<u8>)>>>;

fn sim_with_server(seen: &Seen) -> turmoil::Sim<'static> {
    let mut sim = turmoil::Builder::new()
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(1))
        .simulation_duration(Duration::from_secs(60))
        .build();
    let seen = Rc::clone(seen);
    sim.host("server", move || {
        let seen = Rc::clone(&seen);
        async move {
            let listener = TcpListener::bind(("0.0.0.0", 9000)).await?;
            loop {
                let (mut stream, peer) = listener.accept().await?;
                let seen = Rc::clone(&seen);
                tokio::task::spawn_local(async move {
                    // A greeting, which a client may leave unread.
                    let _ = stream.write_all(&[42]).await;
                    let mut byte = [0u8; 1];
                    loop {
                        match stream.read(&mut byte).await {
                            Ok(1) => seen.borrow_mut().push((peer.port(), Some(byte[0]))),
                            _ => {
                                seen.borrow_mut().push((peer.port(), None));
                                return;
                            }
                        }
                    }
                });
            }
        }
    });
    sim
}

fn steps(sim: &mut turmoil::Sim<'_>, n: usize) {
    for _ in 0..n {
        sim.step().expect("a step");
    }
}

/// The client's two connections' local addresses, once open.
type Ports = Rc<RefCell<Vec<SocketAddr>>>;

#[test]
fn a_held_connection_waits_in_order_while_another_flows() {
    let seen: Seen = Rc::default();
    let mut sim = sim_with_server(&seen);
    let ports: Ports = Rc::default();
    let (opened, sent) = (Rc::clone(&ports), Rc::new(RefCell::new(0u8)));
    let go = Rc::clone(&sent);
    sim.client("client", async move {
        let mut old = TcpStream::connect(("server", 9000)).await?;
        let mut new = TcpStream::connect(("server", 9000)).await?;
        opened.borrow_mut().push(old.local_addr()?);
        opened.borrow_mut().push(new.local_addr()?);
        // The greetings read: nothing unread at the close, which is then graceful (a FIN).
        let mut greeting = [0u8; 1];
        old.read_exact(&mut greeting).await?;
        new.read_exact(&mut greeting).await?;
        // Wait for the test to hold the first connection.
        while *go.borrow() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        old.write_all(&[1, 2]).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        new.write_all(&[3]).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        // A graceful close: the FIN follows what was written, held with it.
        drop(old);
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok(())
    });
    steps(&mut sim, 20);
    let (old, new) = (ports.borrow()[0], ports.borrow()[1]);
    let server: SocketAddr = (sim.lookup("server"), 9000).into();
    sim.hold_stream(old, server);
    *sent.borrow_mut() = 1;
    steps(&mut sim, 100);
    assert_eq!(
        *seen.borrow(),
        vec![(new.port(), Some(3))],
        "only the other connection flowed"
    );
    // A link hold and its release leave the connection held.
    sim.hold("client", "server");
    sim.release("client", "server");
    steps(&mut sim, 20);
    assert_eq!(seen.borrow().len(), 1, "the link's release kept it held");
    sim.release_stream(old, server);
    steps(&mut sim, 20);
    assert_eq!(
        *seen.borrow(),
        vec![
            (new.port(), Some(3)),
            (old.port(), Some(1)),
            (old.port(), Some(2)),
            (old.port(), None),
        ],
        "the held bytes, in order, after the newer connection's, then the FIN"
    );
}

#[test]
fn a_reset_side_fails_and_sends_nothing_while_the_other_stays_open() {
    let seen: Seen = Rc::default();
    let mut sim = sim_with_server(&seen);
    let ports: Ports = Rc::default();
    let failed = Rc::new(RefCell::new(None::<std::io::ErrorKind>));
    let (opened, error) = (Rc::clone(&ports), Rc::clone(&failed));
    sim.client("client", async move {
        let mut read = TcpStream::connect(("server", 9000)).await?;
        // Its greeting stays unread: a side that was reset sends no RST for it at the drop.
        let unread = TcpStream::connect(("server", 9000)).await?;
        opened.borrow_mut().push(read.local_addr()?);
        opened.borrow_mut().push(unread.local_addr()?);
        read.write_all(&[7]).await?;
        let mut byte = [0u8; 1];
        read.read_exact(&mut byte).await?;
        if let Err(e) = read.read(&mut byte).await {
            *error.borrow_mut() = Some(e.kind());
        }
        drop((read, unread));
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok(())
    });
    steps(&mut sim, 20);
    let (read, unread) = (ports.borrow()[0], ports.borrow()[1]);
    let server: SocketAddr = (sim.lookup("server"), 9000).into();
    sim.reset_stream(read, server);
    sim.reset_stream(unread, server);
    steps(&mut sim, 20);
    assert_eq!(
        *failed.borrow(),
        Some(std::io::ErrorKind::ConnectionReset),
        "the reset side's read fails"
    );
    assert_eq!(
        *seen.borrow(),
        vec![(read.port(), Some(7))],
        "the server's sides stay open: no FIN, no RST from a reset side"
    );
}
