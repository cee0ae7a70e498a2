//! airlock's DNS for fenced runs. No query leaves the machine: a name some rule could
//! allow ([`Policy::resolves_for`](airlock_policy::Policy::resolves_for)) gets an address
//! from the run's pool, and a connection to that address is mapped back to the name.
//!
//! - `A`: the pool address (TTL [`TTL_SECS`]).
//! - `AAAA`, `HTTPS`, `SVCB`: no data (`NOERROR`, empty), so clients use the `A` answer.
//! - A name no rule could allow: `NXDOMAIN`, journaled as a denial (method `DNS`, URL
//!   `dns:NAME?type=T`, RFC 4501), so a reviewer sees what the run tried to look up.
//! - Any other type (`TXT`, `MX`, `ANY`…), a class other than `IN`, a name over 253
//!   bytes or a label over [`MAX_LABEL_BYTES`] (RFC 1035 §2.3.4; the parser rejects a
//!   message that carries one): `REFUSED`, journaled (`dns_refused`; the name read
//!   leniently from a message the parser rejects). Together with NXDOMAIN this leaves no DNS channel out: names are
//!   answered here, never asked of a resolver outside.
//! - A message that is not a single standard query: `NOTIMP`.

use std::sync::Arc;

use airlock_ledger::RunId;
use airlock_net::fence::{read_frame, write_frame};
use simple_dns::rdata::{RData, A};
use simple_dns::{Name, Packet, PacketFlag, ResourceRecord, CLASS, OPCODE, QCLASS, RCODE};
use tracing::{debug, info};

use super::Fence;
use crate::denials::{journal, Refusal};
use crate::DataPlane;

/// TTL of pool answers, in seconds: a name keeps its address for the whole run.
pub const TTL_SECS: u32 = 300;
/// Longest name answered, in bytes of its dotted form (RFC 1035 §2.3.4).
pub const MAX_NAME_BYTES: usize = 253;
/// Longest label answered, in bytes (RFC 1035 §2.3.4).
pub const MAX_LABEL_BYTES: usize = 63;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const TYPE_SVCB: u16 = 64;
const TYPE_HTTPS: u16 = 65;

/// Reason code of a DNS query refused for its type, class or shape.
pub const DNS_REFUSED: &str = "dns_refused";

/// Answers framed queries on one fence connection until it closes, it goes
/// [`super::dns_idle_timeout`] without a query (closed and counted), or a query is past
/// the run's `--dns-queries-per-second` (closed unanswered: the resolver retries later).
pub(super) async fn serve<T>(shared: &Arc<DataPlane>, fence: &Fence, run: &RunId, mut stream: T)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let idle = super::dns_idle_timeout(&shared.limits);
    loop {
        let query = match tokio::time::timeout(idle, read_frame(&mut stream)).await {
            Ok(Ok(Some(query))) => query,
            Ok(Ok(None)) => return,
            Ok(Err(error)) => {
                debug!(error = %error, "fence DNS connection ended");
                return;
            }
            Err(_) => {
                debug!(run.id = %run, idle_ms = idle.as_millis() as u64, "DNS connection idle; closed");
                fence.dns_idle(run);
                return;
            }
        };
        if !fence.admit_dns(run, shared.limits.dns_queries_per_second) {
            debug!(run.id = %run, "DNS query past --dns-queries-per-second; the connection is closed unanswered");
            return;
        }
        let answer = answer(shared, fence, run, &query);
        let Some(answer) = answer else { continue };
        if write_frame(&mut stream, &answer).await.is_err() {
            return;
        }
    }
}

/// `REFUSED` for a query airlock answers for no run; `None` when it is too broken to
/// carry an id.
pub(super) fn refused(query: &[u8]) -> Option<Vec<u8>> {
    let id = u16::from_be_bytes([*query.first()?, *query.get(1)?]);
    let mut reply = Packet::new_reply(id);
    *reply.rcode_mut() = RCODE::Refused;
    reply.build_bytes_vec().ok()
}

/// The outcome of one query.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Address(std::net::Ipv4Addr),
    NoData,
    Refused {
        reason_code: String,
        rule: Option<String>,
        rcode: RCODE,
    },
    Malformed(RCODE),
}

/// The answer to one query message; `None` when it is too broken to answer at all.
pub(super) fn answer(
    shared: &Arc<DataPlane>,
    fence: &Fence,
    run: &RunId,
    query: &[u8],
) -> Option<Vec<u8>> {
    let packet = match Packet::parse(query) {
        Ok(packet) => packet,
        Err(error) => {
            // A message the parser rejects (a label past 63 bytes, a name past 255, a
            // truncated question) is refused and journaled like any refused name: it is
            // how an exfiltration attempt looks. REFUSED carries the query's id.
            let id = u16::from_be_bytes([*query.first()?, *query.get(1)?]);
            let mut reply = Packet::new_reply(id);
            *reply.rcode_mut() = RCODE::Refused;
            fence.count(run, |c| c.dns_refused += 1);
            info!(run.id = %run, error = %error, bytes = query.len(), "malformed DNS query refused");
            journal(
                shared,
                run,
                Refusal {
                    method: "DNS".into(),
                    url: match lenient_question(query) {
                        Some((name, qtype)) => format!("dns:{name}?type={}", type_name(qtype)),
                        None => format!("dns:?malformed={}", query.len()),
                    },
                    has_body: false,
                    rule: None,
                    reason_code: DNS_REFUSED.to_owned(),
                    // A DNS query is admitted here: it reads the policy of the moment.
                    #[allow(clippy::disallowed_methods)]
                    policy_revision: shared.policy.current().revision().to_owned(),
                },
            );
            return reply.build_bytes_vec().ok();
        }
    };
    let mut reply = Packet::new_reply(packet.id());
    if packet.has_flags(PacketFlag::RECURSION_DESIRED) {
        reply.set_flags(PacketFlag::RECURSION_DESIRED);
    }
    reply.set_flags(PacketFlag::RECURSION_AVAILABLE);
    let outcome = match (packet.opcode(), packet.questions.as_slice()) {
        (OPCODE::StandardQuery, [question]) => {
            reply.questions.push(question.clone());
            decide(shared, fence, run, question)
        }
        _ => Outcome::Malformed(RCODE::NotImplemented),
    };
    match outcome {
        Outcome::Address(addr) => {
            fence.count(run, |c| c.dns_answered += 1);
            let name = reply.questions[0].qname.clone();
            reply.answers.push(ResourceRecord::new(
                name,
                CLASS::IN,
                TTL_SECS,
                RData::A(A::from(addr)),
            ));
        }
        Outcome::NoData => fence.count(run, |c| c.dns_answered += 1),
        Outcome::Refused { rcode, .. } | Outcome::Malformed(rcode) => {
            fence.count(run, |c| c.dns_refused += 1);
            *reply.rcode_mut() = rcode;
        }
    }
    reply.build_bytes_vec_compressed().ok()
}

fn decide(
    shared: &Arc<DataPlane>,
    fence: &Fence,
    run: &RunId,
    question: &simple_dns::Question<'_>,
) -> Outcome {
    let qtype = u16::from(question.qtype);
    let name = dotted(&question.qname);
    // One snapshot answers this DNS query (admission: a query is not a request).
    #[allow(clippy::disallowed_methods)]
    let policy = shared.policy.current();
    let refuse = |reason_code: &str, rule: Option<String>, rcode: RCODE, why: &str| {
        info!(run.id = %run, dns.name = %name, dns.type = qtype, reason = why, "DNS query refused");
        journal(
            shared,
            run,
            Refusal {
                method: "DNS".into(),
                url: format!("dns:{name}?type={}", type_name(qtype)),
                has_body: false,
                rule: rule.clone(),
                reason_code: reason_code.to_owned(),
                policy_revision: policy.revision().to_owned(),
            },
        );
        Outcome::Refused {
            reason_code: reason_code.to_owned(),
            rule,
            rcode,
        }
    };
    if question.qclass != QCLASS::CLASS(CLASS::IN) {
        return refuse(DNS_REFUSED, None, RCODE::Refused, "class is not IN");
    }
    let long_label = question
        .qname
        .iter()
        .any(|label| label.len() > MAX_LABEL_BYTES);
    if name.len() > MAX_NAME_BYTES || long_label {
        return refuse(
            DNS_REFUSED,
            None,
            RCODE::Refused,
            "name or label over RFC 1035's limits",
        );
    }
    if !matches!(qtype, TYPE_A | TYPE_AAAA | TYPE_SVCB | TYPE_HTTPS) {
        return refuse(
            DNS_REFUSED,
            None,
            RCODE::Refused,
            "airlock answers A (and no-data AAAA, HTTPS, SVCB) only",
        );
    }
    // The manifest's reserved host always resolves: airlock answers it itself.
    if name != crate::manifest::MANIFEST_HOST {
        let profile = crate::enforce::profile_of(shared, run).ok().flatten();
        if let Some(decision) = policy.resolves_for(&name, profile.as_deref()) {
            return refuse(
                decision.reason_code,
                decision.rule,
                RCODE::NameError,
                &decision.reason,
            );
        }
    }
    if qtype != TYPE_A {
        return Outcome::NoData;
    }
    match fence.with_run(run, |f| f.names.address(&name)) {
        Some(addr) => Outcome::Address(addr),
        None => refuse(
            DNS_REFUSED,
            None,
            RCODE::Refused,
            "the run holds the most names the pool gives one run",
        ),
    }
}

/// The first question of a message the parser rejected, read without its limits (a label
/// may claim up to 255 bytes), so the journal names what the run tried to look up; `None`
/// when even that fails. Uncompressed names only, at most 1,024 bytes of text.
fn lenient_question(query: &[u8]) -> Option<(String, u16)> {
    let mut at = 12usize;
    let mut labels: Vec<String> = Vec::new();
    loop {
        let len = *query.get(at)? as usize;
        at += 1;
        if len == 0 {
            break;
        }
        let label = query.get(at..at + len)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += len;
        if labels.iter().map(|l| l.len() + 1).sum::<usize>() > 1024 {
            return None;
        }
    }
    let qtype = u16::from_be_bytes([*query.get(at)?, *query.get(at + 1)?]);
    Some((labels.join("."), qtype))
}

/// The name in lower case, dotted, without the root's trailing dot.
fn dotted(name: &Name<'_>) -> String {
    name.to_string().trim_end_matches('.').to_ascii_lowercase()
}

fn type_name(qtype: u16) -> String {
    match qtype {
        TYPE_A => "A".into(),
        TYPE_AAAA => "AAAA".into(),
        16 => "TXT".into(),
        15 => "MX".into(),
        255 => "ANY".into(),
        TYPE_HTTPS => "HTTPS".into(),
        TYPE_SVCB => "SVCB".into(),
        other => other.to_string(),
    }
}
