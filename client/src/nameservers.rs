//! Questions to the nameservers, asked of all of them side by side. A nameserver whose host
//! vanished answers nothing, and every call to it waits for its timeout; asked one after
//! another, it would hold every answer behind it. Asked side by side, the first nameserver
//! that has the answer decides, and a vanished one delays nothing while another answers.
//!
//! Nameservers are stateless and each learns from the brokers on its own, so one may not
//! know yet what another does (it just restarted): a "not found" decides only after the
//! others had [`NOT_FOUND_GRACE`] more to answer with something, or all answered.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

/// How long a "not found" waits for another nameserver to answer with something.
pub const NOT_FOUND_GRACE: Duration = Duration::from_millis(250);

/// Why one nameserver gave no answer to use.
#[derive(Debug)]
pub enum Refusal<E> {
    /// It answered that it has nothing (an unknown topic): an answer, but another
    /// nameserver may know more.
    NotFound(E),
    /// It could not be asked, or failed to answer.
    Failed(String),
}

/// Why no nameserver answered with something.
#[derive(Debug)]
pub enum Unanswered<E> {
    /// The first "not found", and no nameserver knew better.
    NotFound(E),
    /// None answered; the last failure, prefixed with its nameserver.
    Failed(String),
}

/// Asks every nameserver in `nameservers` side by side with `ask`; the first answer wins.
pub async fn ask_side_by_side<T, E, F, Fut>(
    nameservers: &[String],
    ask: F,
) -> Result<T, Unanswered<E>>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<T, Refusal<E>>>,
{
    let mut pending: FuturesUnordered<_> = (0..nameservers.len())
        .map(|index| {
            let asked = ask(index);
            async move { (index, asked.await) }
        })
        .collect();
    let mut last_error = String::from("no nameserver configured");
    let mut not_found = None;
    let grace = tokio::time::sleep(Duration::MAX);
    tokio::pin!(grace);
    loop {
        let (index, answer) = tokio::select! {
            next = pending.next() => match next {
                Some(next) => next,
                None => break,
            },
            () = &mut grace, if not_found.is_some() => break,
        };
        match answer {
            Ok(value) => return Ok(value),
            Err(Refusal::NotFound(error)) => {
                if not_found.is_none() {
                    grace
                        .as_mut()
                        .reset(tokio::time::Instant::now() + NOT_FOUND_GRACE);
                    not_found = Some(error);
                }
            }
            Err(Refusal::Failed(error)) => last_error = format!("{}: {error}", nameservers[index]),
        }
    }
    Err(not_found.map_or(Unanswered::Failed(last_error), Unanswered::NotFound))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nameservers(count: usize) -> Vec<String> {
        (0..count).map(|n| format!("ns{n}:9876")).collect()
    }

    /// A nameserver that never answers, as one whose host vanished.
    async fn vanished<T>() -> Result<T, Refusal<()>> {
        std::future::pending().await
    }

    #[tokio::test(start_paused = true)]
    async fn a_vanished_first_nameserver_delays_no_answer() {
        let started = tokio::time::Instant::now();
        let answer = ask_side_by_side(&nameservers(3), |index| async move {
            match index {
                0 => vanished().await,
                1 => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ok("route")
                }
                _ => Err(Refusal::Failed("refused".into())),
            }
        })
        .await;
        assert_eq!(answer.ok(), Some("route"));
        assert_eq!(started.elapsed(), Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn not_found_waits_a_grace_for_a_nameserver_that_knows() {
        let answer = ask_side_by_side(&nameservers(2), |index| async move {
            if index == 0 {
                Err(Refusal::NotFound(()))
            } else {
                tokio::time::sleep(NOT_FOUND_GRACE / 2).await;
                Ok("route")
            }
        })
        .await;
        assert_eq!(answer.ok(), Some("route"));
    }

    #[tokio::test(start_paused = true)]
    async fn not_found_decides_after_its_grace_even_with_a_vanished_nameserver() {
        let started = tokio::time::Instant::now();
        let answer: Result<(), _> = ask_side_by_side(&nameservers(2), |index| async move {
            match index {
                0 => vanished().await,
                _ => Err(Refusal::NotFound(())),
            }
        })
        .await;
        assert!(matches!(answer, Err(Unanswered::NotFound(()))));
        assert_eq!(started.elapsed(), NOT_FOUND_GRACE);
    }

    #[tokio::test]
    async fn no_answer_names_the_last_failure() {
        let answer: Result<(), Unanswered<()>> = ask_side_by_side(&nameservers(1), |_| async {
            Err(Refusal::Failed("connection refused".into()))
        })
        .await;
        match answer {
            Err(Unanswered::Failed(error)) => assert_eq!(error, "ns0:9876: connection refused"),
            other => panic!("{other:?}"),
        }
        let none: Result<(), Unanswered<()>> = ask_side_by_side(&[], |_| async { Ok(()) }).await;
        assert!(matches!(none, Err(Unanswered::Failed(error)) if error.contains("no nameserver")));
    }
}
