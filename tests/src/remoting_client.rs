//! A 4.x client's connection for tests that speak RocketMQ's remoting frames themselves (what
//! no installable client does: transactions' check-backs, orderly locks, notices): plain TCP,
//! requests matched to replies by `opaque`, and the broker's own requests to the client kept
//! until a test asks for them. Also a pull body's stored records, decoded as a client does, and
//! the object-keyed maps of admin replies, read as fastjson reads them.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::Context;
use bytes::Buf;
use bytes::Bytes;
use futures::SinkExt;
use futures::StreamExt;
use rocketraft_remoting::ExtFields;
use rocketraft_remoting::RemotingCodec;
use rocketraft_remoting::RemotingCommand;
use rocketraft_remoting::SerializeType;
use rocketraft_remoting::codes::request;
use rocketraft_remoting::codes::response;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// How long a reply may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// `MessageDecoder.MESSAGE_MAGIC_CODE`.
const MESSAGE_MAGIC_CODE: i32 = 0xDAA3_20A7_u32 as i32;
/// SYSFLAG bits of IPv6 born and store hosts.
const HOSTS_V6_FLAGS: i32 = 0x30;

/// One 4.x client connection.
pub struct RemotingClient {
    frames: Framed<TcpStream, RemotingCodec>,
    next_opaque: i32,
    /// The broker's requests to this client, in arrival order, not yet taken.
    pushed: VecDeque<RemotingCommand>,
}

impl RemotingClient {
    pub async fn connect(addr: &str) -> anyhow::Result<RemotingClient> {
        let stream = TcpStream::connect(addr).await?;
        Ok(RemotingClient {
            frames: Framed::new(stream, RemotingCodec),
            next_opaque: 0,
            pushed: VecDeque::new(),
        })
    }

    /// Sends request `code` with `fields` and `body` in `serialize_type`; returns its reply.
    pub async fn call_with(
        &mut self,
        code: i32,
        fields: &[(&str, &str)],
        body: Bytes,
        serialize_type: SerializeType,
    ) -> anyhow::Result<RemotingCommand> {
        self.next_opaque += 1;
        let mut ext_fields = ExtFields::new();
        for (name, value) in fields {
            ext_fields.insert(*name, *value);
        }
        let request = RemotingCommand {
            code,
            version: 409,
            opaque: self.next_opaque,
            ext_fields,
            serialize_type,
            body,
            ..RemotingCommand::default()
        };
        self.frames.send(request).await?;
        loop {
            let frame = self.next_frame(REPLY_TIMEOUT).await?;
            if !frame.is_response() {
                self.pushed.push_back(frame);
                continue;
            }
            anyhow::ensure!(
                frame.opaque == self.next_opaque,
                "reply to {} for {}",
                frame.opaque,
                self.next_opaque
            );
            return Ok(frame);
        }
    }

    /// [`RemotingClient::call_with`] with no body.
    pub async fn call(
        &mut self,
        code: i32,
        fields: &[(&str, &str)],
        serialize_type: SerializeType,
    ) -> anyhow::Result<RemotingCommand> {
        self.call_with(code, fields, Bytes::new(), serialize_type)
            .await
    }

    /// A successful JSON reply to request `code` with `fields` and `body`.
    pub async fn ok(
        &mut self,
        code: i32,
        fields: &[(&str, &str)],
        body: Bytes,
    ) -> anyhow::Result<RemotingCommand> {
        let reply = self
            .call_with(code, fields, body, SerializeType::Json)
            .await?;
        anyhow::ensure!(reply.code == response::SUCCESS, "{reply:?}");
        Ok(reply)
    }

    /// Creates `topic` with `queues` read and write queues (`UPDATE_AND_CREATE_TOPIC`).
    pub async fn create_topic(&mut self, topic: &str, queues: u32) -> anyhow::Result<()> {
        let queues = queues.to_string();
        let fields = [
            ("topic", topic),
            ("readQueueNums", queues.as_str()),
            ("writeQueueNums", queues.as_str()),
        ];
        self.ok(request::UPDATE_AND_CREATE_TOPIC, &fields, Bytes::new())
            .await?;
        Ok(())
    }

    /// Sends one message with `SEND_MESSAGE_V2` as a Java producer of `group` does, to
    /// `queue_id` of `topic` with `sys_flag` and `properties` (RocketMQ's encoding); returns
    /// the offset message id the broker answered.
    pub async fn send_v2(
        &mut self,
        group: &str,
        topic: &str,
        queue_id: i32,
        sys_flag: i32,
        properties: &str,
        body: Bytes,
    ) -> anyhow::Result<String> {
        let (queue_id, sys_flag) = (queue_id.to_string(), sys_flag.to_string());
        let fields = [
            ("a", group),
            ("b", topic),
            ("c", "TBW102"),
            ("d", "4"),
            ("e", queue_id.as_str()),
            ("f", sys_flag.as_str()),
            ("g", "1700000000000"),
            ("h", "0"),
            ("i", properties),
        ];
        let reply = self.ok(request::SEND_MESSAGE_V2, &fields, body).await?;
        Ok(reply.ext_fields.required_str("msgId")?.to_owned())
    }

    /// The JSON body of a successful reply to `code`.
    pub async fn json(&mut self, code: i32, fields: &[(&str, &str)]) -> anyhow::Result<Value> {
        let reply = self.ok(code, fields, Bytes::new()).await?;
        Ok(serde_json::from_slice(&reply.body)?)
    }

    /// The `offset` a successful reply to `code` names.
    pub async fn offset(&mut self, code: i32, fields: &[(&str, &str)]) -> anyhow::Result<i64> {
        let reply = self.ok(code, fields, Bytes::new()).await?;
        Ok(reply.ext_fields.required_i64("offset")?)
    }

    /// The next request with `code` the broker sent this client, waiting up to `timeout`;
    /// `None` if none came by then.
    pub async fn pushed(
        &mut self,
        code: i32,
        timeout: Duration,
    ) -> anyhow::Result<Option<RemotingCommand>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(at) = self.pushed.iter().position(|pushed| pushed.code == code) {
                return Ok(self.pushed.remove(at));
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            match self.next_frame(left).await {
                Ok(frame) if frame.is_response() => {
                    anyhow::bail!("a reply no call waits for: {frame:?}")
                }
                Ok(frame) => self.pushed.push_back(frame),
                Err(_) if tokio::time::Instant::now() >= deadline => return Ok(None),
                Err(error) => return Err(error),
            }
        }
    }

    async fn next_frame(&mut self, timeout: Duration) -> anyhow::Result<RemotingCommand> {
        Ok(tokio::time::timeout(timeout, self.frames.next())
            .await
            .context("no frame in time")?
            .context("the connection closed")??)
    }
}

/// A stored record as a 4.x client decodes it from a pull's body: field after field, as
/// `MessageDecoder.clientDecode` does, with IPv4 hosts.
#[derive(Debug, Clone)]
pub struct StoredRecord {
    pub queue_id: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub reconsume_times: i32,
    pub store_host: [u8; 8],
    pub body: Vec<u8>,
    pub topic: String,
    pub properties: String,
}

impl StoredRecord {
    /// The offset message id a client computes: the store host and the CommitLog offset.
    pub fn offset_msg_id(&self) -> String {
        let mut id: Vec<u8> = self.store_host.to_vec();
        id.extend_from_slice(&self.physical_offset.to_be_bytes());
        id.iter().map(|byte| format!("{byte:02X}")).collect()
    }

    /// The value of property `name`.
    pub fn property(&self, name: &str) -> Option<&str> {
        self.properties.split('\u{2}').find_map(|pair| {
            let (key, value) = pair.split_once('\u{1}')?;
            (key == name).then_some(value)
        })
    }
}

/// The records of a pull's body (or a check-back's), decoded in sequence.
pub fn decode_records(mut body: &[u8]) -> anyhow::Result<Vec<StoredRecord>> {
    let mut records = Vec::new();
    while body.has_remaining() {
        let _total_size = body.try_get_i32()?;
        anyhow::ensure!(body.try_get_i32()? == MESSAGE_MAGIC_CODE, "magic code");
        let _body_crc = body.try_get_i32()?;
        let queue_id = body.try_get_i32()?;
        let _flag = body.try_get_i32()?;
        let queue_offset = body.try_get_i64()?;
        let physical_offset = body.try_get_i64()?;
        let sys_flag = body.try_get_i32()?;
        anyhow::ensure!(sys_flag & HOSTS_V6_FLAGS == 0, "IPv4 hosts");
        let _born_timestamp = body.try_get_i64()?;
        let _born_host = body.try_get_u64()?;
        let _store_timestamp = body.try_get_i64()?;
        let mut store_host = [0; 8];
        body.try_copy_to_slice(&mut store_host)?;
        let reconsume_times = body.try_get_i32()?;
        let _prepared_offset = body.try_get_i64()?;
        let body_len = usize::try_from(body.try_get_i32()?)?;
        let message_body = take(&mut body, body_len)?;
        let topic_len = usize::from(body.try_get_u8()?);
        let topic = String::from_utf8(take(&mut body, topic_len)?)?;
        let properties_len = usize::try_from(body.try_get_i16()?)?;
        let properties = String::from_utf8(take(&mut body, properties_len)?)?;
        records.push(StoredRecord {
            queue_id,
            queue_offset,
            physical_offset,
            reconsume_times,
            store_host,
            body: message_body,
            topic,
            properties,
        });
    }
    Ok(records)
}

/// The next `len` bytes of `body`.
fn take(body: &mut &[u8], len: usize) -> anyhow::Result<Vec<u8>> {
    let taken = body
        .get(..len)
        .context("a field runs past the body")?
        .to_vec();
    body.advance(len);
    Ok(taken)
}

/// The entries of the object-keyed map under `field` of an admin reply's body
/// (`{"offsetTable":{{"brokerName":..}:{..},..},..}`), each key and value read as JSON, as
/// fastjson reads them: the form no JSON parser takes whole.
pub fn object_keyed_entries(body: &[u8], field: &str) -> anyhow::Result<Vec<(Value, Value)>> {
    let text = std::str::from_utf8(body)?;
    let opening = format!("\"{field}\":{{");
    let at = text.find(&opening).context("no such map")? + opening.len();
    let mut rest = &text[at..];
    let mut entries = Vec::new();
    if let Some(after) = rest.strip_prefix('}') {
        anyhow::ensure!(after.starts_with([',', '}']), "a map ends: {after}");
        return Ok(entries);
    }
    loop {
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let key = values.next().context("a key")??;
        rest = rest[values.byte_offset()..]
            .strip_prefix(':')
            .context("a colon after a key")?;
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let value = values.next().context("a value")??;
        rest = &rest[values.byte_offset()..];
        entries.push((key, value));
        match rest.as_bytes().first() {
            Some(b',') => rest = &rest[1..],
            Some(b'}') => return Ok(entries),
            _ => anyhow::bail!("an entry ends with , or }}: {rest}"),
        }
    }
}
