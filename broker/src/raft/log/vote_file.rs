//! The Raft vote on disk, kept in two copies (`vote` and `vote-mirror` in the Raft log
//! directory), each a checksummed durable file, so that damage to one copy is repaired from the
//! other instead of stopping the node (as a storage system keeps its superblock in copies).
//!
//! A node that forgot its vote could vote twice in one term, and nothing else on the node
//! bounds that term: the copy is the local fact that does.
//!
//! Invariants:
//! - a save writes `vote-mirror`, then `vote`, each fsynced and renamed in place, and returns
//!   only after both: once a vote is acknowledged (openraft acts on it only then) both copies
//!   hold it;
//! - so two intact copies differ only after a crash between the two writes, and the newer
//!   (the greater vote: votes only grow) is the one read; the older is then the vote before a
//!   save that never returned, which no vote of this node relied on;
//! - a damaged or missing copy beside an intact one is rewritten from it at open;
//! - a damaged `vote-mirror` without a `vote` is a first save cut short (earlier builds wrote
//!   only `vote`, and a save writes the mirror first): no vote was acknowledged, so none is
//!   read;
//! - otherwise both copies damaged (or `vote` damaged with no mirror, from an earlier build) is
//!   an error naming the files: nothing left on the node says which term it voted in.

use std::io;
use std::path::Path;

use crate::disk::Disk;
use crate::durable_file;
use crate::durable_file::DurableFileError;
use crate::raft::codec;
use crate::raft::types::Vote;

/// The first copy's file; also the only one data dirs of earlier builds have.
const VOTE_FILE: &str = "vote";
/// The second copy's file.
const MIRROR_FILE: &str = "vote-mirror";

/// What one copy held at open.
enum Copy {
    Missing,
    Intact(Vote),
    Damaged(DurableFileError),
}

/// Reads the vote of the log in `dir` (none if never saved), and rewrites a damaged or missing
/// copy from the intact one.
pub fn open(disk: &dyn Disk, dir: &Path) -> io::Result<Option<Vote>> {
    let (first, mirror) = (
        read_copy(disk, dir, VOTE_FILE)?,
        read_copy(disk, dir, MIRROR_FILE)?,
    );
    let vote = match (first, mirror) {
        (Copy::Missing, Copy::Missing) => return Ok(None),
        (Copy::Intact(first), Copy::Intact(mirror)) => {
            if first == mirror {
                return Ok(Some(first));
            }
            let newer = newer(first, mirror).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the two copies of the raft vote in {} disagree ({first} and {mirror}): \
                         wipe this node's data dir and let it rejoin its group",
                        dir.display()
                    ),
                )
            })?;
            tracing::warn!(
                dir = %dir.display(), %newer,
                "the raft vote's copies differ (a crash between their writes): keeping the newer"
            );
            newer
        }
        (Copy::Intact(vote), other) | (other, Copy::Intact(vote)) => {
            match other {
                Copy::Damaged(error) => tracing::error!(
                    %error, %vote,
                    "a copy of the raft vote is damaged: restoring it from the other copy"
                ),
                _ => tracing::info!(dir = %dir.display(), "writing the raft vote's second copy"),
            }
            vote
        }
        (Copy::Missing, Copy::Damaged(error)) => {
            tracing::warn!(
                %error,
                "the first save of the raft vote was cut short and left its copy damaged: no vote \
                 was acknowledged"
            );
            return Ok(None);
        }
        (Copy::Damaged(error), _) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{error}, and no intact copy of the raft vote is left in {}: this node could \
                     vote twice in one term; wipe its data dir and let it rejoin its group",
                    dir.display()
                ),
            ));
        }
    };
    save(disk, dir, &vote)?;
    Ok(Some(vote))
}

/// Saves `vote` in both copies; returns once both are durable.
pub fn save(disk: &dyn Disk, dir: &Path, vote: &Vote) -> io::Result<()> {
    let encoded = codec::encode("raft vote", vote)?;
    for name in [MIRROR_FILE, VOTE_FILE] {
        durable_file::write_atomic_on(disk, &dir.join(name), &encoded)?;
    }
    Ok(())
}

/// Whether a vote was ever saved in `dir` (a copy exists, intact or not).
pub fn exists(disk: &dyn Disk, dir: &Path) -> io::Result<bool> {
    for name in [VOTE_FILE, MIRROR_FILE] {
        match disk.read(&dir.join(name)) {
            Ok(_) => return Ok(true),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
    }
    Ok(false)
}

/// The copies' files in `dir`.
#[cfg(test)]
pub fn copy_paths(dir: &Path) -> [std::path::PathBuf; 2] {
    [dir.join(VOTE_FILE), dir.join(MIRROR_FILE)]
}

fn read_copy(disk: &dyn Disk, dir: &Path, name: &str) -> io::Result<Copy> {
    let bytes = match durable_file::read_on(disk, &dir.join(name)) {
        Ok(None) => return Ok(Copy::Missing),
        Ok(Some(bytes)) => bytes,
        Err(error @ DurableFileError::Corrupt { .. }) => return Ok(Copy::Damaged(error)),
        Err(error) => return Err(error.into()),
    };
    match codec::decode::<Vote>("raft vote", &bytes) {
        Ok(vote) => Ok(Copy::Intact(vote)),
        // A frame whose checksum holds but whose content does not decode was written so:
        // a fault of the writer, not the disk; stop rather than guess.
        Err(error) => Err(error.into()),
    }
}

/// The greater of two votes, if they compare (votes of one node only grow).
fn newer(a: Vote, b: Vote) -> Option<Vote> {
    match a.partial_cmp(&b)? {
        std::cmp::Ordering::Less => Some(b),
        _ => Some(a),
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::disk::OsDisk;

    fn flip_a_byte(path: &Path) {
        let mut bytes = fs::read(path).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        fs::write(path, bytes).expect("write");
    }

    #[test]
    fn a_saved_vote_is_read_back_from_either_copy() {
        let dir = tempfile::tempdir().expect("dir");
        assert_eq!(open(&OsDisk, dir.path()).expect("open"), None);
        assert!(!exists(&OsDisk, dir.path()).expect("exists"));
        let vote = Vote::new(7, 2);
        save(&OsDisk, dir.path(), &vote).expect("save");
        assert!(exists(&OsDisk, dir.path()).expect("exists"));
        for damaged in copy_paths(dir.path()) {
            flip_a_byte(&damaged);
            assert_eq!(open(&OsDisk, dir.path()).expect("open"), Some(vote));
            // The damaged copy was rewritten: the other one may now be damaged in turn.
            assert!(durable_file::read_on(&OsDisk, &damaged).is_ok());
        }
    }

    /// Writes `vote` to the copy `name` alone, as a save cut short after it.
    fn write_copy(dir: &Path, name: &str, vote: &Vote) {
        let encoded = codec::encode("raft vote", vote).expect("encode");
        durable_file::write_atomic_on(&OsDisk, &dir.join(name), &encoded).expect("copy");
    }

    #[test]
    fn copies_left_apart_by_a_crash_keep_the_newer_vote_and_agree_again() {
        let dir = tempfile::tempdir().expect("dir");
        let (older, newer_vote) = (Vote::new(3, 1), Vote::new(4, 2));
        save(&OsDisk, dir.path(), &older).expect("save");
        write_copy(dir.path(), MIRROR_FILE, &newer_vote);
        assert_eq!(open(&OsDisk, dir.path()).expect("open"), Some(newer_vote));
        flip_a_byte(&dir.path().join(MIRROR_FILE));
        assert_eq!(
            open(&OsDisk, dir.path()).expect("open"),
            Some(newer_vote),
            "the first copy was brought up to the newer vote at the open before"
        );
    }

    #[test]
    fn a_first_save_cut_short_leaves_no_vote_even_if_its_copy_rotted() {
        let dir = tempfile::tempdir().expect("dir");
        write_copy(dir.path(), MIRROR_FILE, &Vote::new(1, 1));
        flip_a_byte(&dir.path().join(MIRROR_FILE));
        assert_eq!(open(&OsDisk, dir.path()).expect("open"), None);
    }

    #[test]
    fn a_vote_of_an_earlier_build_gets_its_second_copy() {
        let dir = tempfile::tempdir().expect("dir");
        let vote = Vote::new(5, 3);
        write_copy(dir.path(), VOTE_FILE, &vote);
        assert_eq!(open(&OsDisk, dir.path()).expect("open"), Some(vote));
        flip_a_byte(&dir.path().join(VOTE_FILE));
        assert_eq!(open(&OsDisk, dir.path()).expect("open"), Some(vote));
    }

    #[test]
    fn without_an_intact_copy_the_node_stops_and_says_why() {
        let dir = tempfile::tempdir().expect("dir");
        save(&OsDisk, dir.path(), &Vote::new(2, 1)).expect("save");
        for path in copy_paths(dir.path()) {
            flip_a_byte(&path);
        }
        let error = open(&OsDisk, dir.path()).expect_err("both damaged");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(error.to_string().contains("no intact copy"), "{error}");

        let dir = tempfile::tempdir().expect("dir");
        write_copy(dir.path(), VOTE_FILE, &Vote::new(2, 1));
        flip_a_byte(&dir.path().join(VOTE_FILE));
        assert!(
            open(&OsDisk, dir.path()).is_err(),
            "an earlier build's only copy, damaged"
        );
    }
}
