//! A scripted Redis for the cluster's tests: it listens on a loopback port, answers one
//! connection's commands as [`Answers`] say (the push script emulated on its counters), and
//! hands back what it exchanged. The link's tests (`redis`) and the sync task's (`sync`) use it.

use std::net::SocketAddr;

/// One command as a scripted Redis read it, and its reply.
#[derive(Debug)]
pub(super) struct Exchange {
    pub(super) args: Vec<Vec<u8>>,
    /// Bytes of the command and of the reply, as they crossed the wire.
    pub(super) request: usize,
    pub(super) reply: usize,
    /// Commands Redis would have run for it (the script's own inside `EVALSHA`).
    pub(super) ran: u64,
}

/// How the scripted Redis answers (the sync task's tests use it too).
#[derive(Clone, Debug)]
pub(super) struct Answers {
    /// `ROLE`'s reply.
    pub(super) role: &'static [u8],
    /// The dataset id a round's `GET` finds (the connect reads `ID`).
    pub(super) held: Option<&'static str>,
    /// The error `EVALSHA` answers with, if any (the script's refusal to write into
    /// another dataset, say).
    pub(super) refuse: Option<&'static [u8]>,
    /// `SENTINEL get-master-addr-by-name`'s reply.
    pub(super) sentinel: &'static [u8],
    /// The counters `EVALSHA` finds, by key (absent ones hold 0).
    pub(super) counters: Vec<(Vec<u8>, i64)>,
    /// What `ZRANGEBYSCORE` holds: (member, score).
    pub(super) live: Vec<(Vec<u8>, u64)>,
}

pub(super) const ID: &str = "18f2a9c3b4d5e-0123456789abcdef";

impl Default for Answers {
    fn default() -> Answers {
        Answers {
            role: b"*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n",
            held: Some(ID),
            refuse: None,
            sentinel: b"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n",
            counters: Vec::new(),
            live: Vec::new(),
        }
    }
}

fn bulk(text: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", text.len()).into_bytes();
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
    out
}

fn array(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    items.iter().for_each(|item| out.extend_from_slice(item));
    out
}

fn number(text: &[u8]) -> u64 {
    std::str::from_utf8(text).unwrap().parse().unwrap()
}

impl Answers {
    /// The reply to `args` (the push script emulated on `counters`), and the commands
    /// Redis ran for it.
    fn reply(&mut self, args: &[Vec<u8>], in_round: bool) -> (Vec<u8>, u64) {
        let reply = match &args[0][..] {
            b"SCRIPT" => bulk(&[b'a'; 40]),
            b"ROLE" => self.role.to_vec(),
            b"SENTINEL" => self.sentinel.to_vec(),
            b"INFO" => bulk(b"# Server\r\nredis_version:7.0.15\r\nrun_id:r1\r\n"),
            b"TIME" => array(&[bulk(b"1700000000"), bulk(b"012345")]),
            b"GET" if args[1].ends_with(b":dataset") => match (in_round, self.held) {
                (false, _) => bulk(ID.as_bytes()),
                (true, Some(held)) => bulk(held.as_bytes()),
                (true, None) => b"$-1\r\n".to_vec(),
            },
            b"GET" => bulk(b"v7"),
            b"EVALSHA" => return self.push(args),
            b"ZRANGEBYSCORE" => array(
                &self
                    .live
                    .iter()
                    .flat_map(|(member, until)| [bulk(member), bulk(until.to_string().as_bytes())])
                    .collect::<Vec<_>>(),
            ),
            b"ZADD" | b"PEXPIRE" => b":1\r\n".to_vec(),
            b"ZREMRANGEBYSCORE" => b":0\r\n".to_vec(),
            _ => b"+OK\r\n".to_vec(),
        };
        (reply, 1)
    }

    /// `SCRIPT` as Redis runs it: `EVALSHA sha numkeys dataset-key (current previous)...
    /// dataset (ttl add-current add-previous)...`.
    fn push(&mut self, args: &[Vec<u8>]) -> (Vec<u8>, u64) {
        if let Some(error) = self.refuse {
            return (error.to_vec(), 2);
        }
        let keys = usize::try_from(number(&args[2])).unwrap();
        let (counters, argv) = (&args[4..3 + keys], &args[3 + keys..]);
        assert_eq!(argv[0], ID.as_bytes());
        assert_eq!(argv.len(), 1 + counters.len() / 2 * 3, "ARGV per suspect");
        let (mut out, mut ran) = (Vec::new(), 2);
        for (i, key) in counters.iter().enumerate() {
            let delta = number(&argv[1 + i / 2 * 3 + 1 + i % 2]);
            let held = match self.counters.iter_mut().find(|(k, _)| k == key) {
                Some((_, count)) => count,
                None => {
                    self.counters.push((key.clone(), 0));
                    &mut self.counters.last_mut().unwrap().1
                }
            };
            *held += i64::try_from(delta).unwrap();
            ran += if delta > 0 { 2 } else { 1 };
            out.push(format!(":{held}\r\n").into_bytes());
        }
        (array(&out), ran)
    }
}

/// Reads one command (an array of bulk strings) and its size; `None` at the end.
async fn command<R>(reader: &mut R) -> Option<(Vec<Vec<u8>>, usize)>
where
    R: tokio::io::AsyncBufRead + Unpin,
{
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let mut line = Vec::new();
    let mut size = reader.read_until(b'\n', &mut line).await.ok()?;
    if size == 0 {
        return None;
    }
    let count = number(&line[1..line.len() - 2]);
    let mut args = Vec::new();
    for _ in 0..count {
        line.clear();
        size += reader.read_until(b'\n', &mut line).await.ok()?;
        let mut arg = vec![0; usize::try_from(number(&line[1..line.len() - 2])).unwrap() + 2];
        size += reader.read_exact(&mut arg).await.ok()?;
        arg.truncate(arg.len() - 2);
        args.push(arg);
    }
    Some((args, size))
}

/// A Redis on a loopback port answering one connection with `answers`; what it
/// exchanged from the round's `TIME` on.
pub(super) async fn scripted(
    mut answers: Answers,
) -> (SocketAddr, tokio::task::JoinHandle<Vec<Exchange>>) {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let serve = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (reader, mut writer) = stream.into_split();
        let mut reader = tokio::io::BufReader::new(reader);
        let mut round = Vec::new();
        while let Some((args, request)) = command(&mut reader).await {
            let in_round = !round.is_empty() || args[0] == b"TIME";
            let (reply, ran) = answers.reply(&args, in_round);
            writer.write_all(&reply).await.unwrap();
            if in_round {
                round.push(Exchange {
                    args,
                    request,
                    reply: reply.len(),
                    ran,
                });
            }
        }
        round
    });
    (address, serve)
}
