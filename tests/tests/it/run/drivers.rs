//! `airlock run` drivers: the git driver restores exactly; the cmd driver and its residue check.

use airlock_tests::{loopback_policy, ok_origin, Fixture};
use serde_json::json;

use super::{agent_script, git, json_report, output, sh_command, tree, workspace, write_policy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_git_driver_restores_untracked_files_and_a_dirty_index_exactly() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let repo = fx.dir.path().join("repo");
    std::fs::create_dir_all(&repo).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join(".gitignore"), "*.log\n").expect("write");
    std::fs::write(repo.join("tracked.txt"), "v1\n").expect("write");
    std::fs::write(repo.join("other.txt"), "other\n").expect("write");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "first"]);
    // A dirty index: a staged change, then a further unstaged one; a staged new file;
    // an untracked file; an ignored file.
    std::fs::write(repo.join("tracked.txt"), "v2 staged\n").expect("write");
    git(&repo, &["add", "tracked.txt"]);
    std::fs::write(repo.join("tracked.txt"), "v3 in the work tree\n").expect("write");
    std::fs::write(repo.join("staged-new.txt"), "new and staged\n").expect("write");
    git(&repo, &["add", "staged-new.txt"]);
    std::fs::write(repo.join("untracked.txt"), "untracked\n").expect("write");
    std::fs::write(repo.join("build.log"), "ignored\n").expect("write");
    let index_path = repo.join(".git/index");
    let index_before = std::fs::read(&index_path).expect("index");
    let head_before = git(&repo, &["rev-parse", "HEAD"]);
    let files_before = tree(&repo);
    let status_before = git(&repo, &["status", "--porcelain=v1", "-uall"]);
    let diff_cached_before = git(&repo, &["diff", "--cached"]);

    // The agent edits, stages, commits, deletes an untracked file and creates new ones.
    let script = "echo agent >> tracked.txt && rm untracked.txt && echo more > fresh.txt \
                  && mkdir -p newdir && echo y > newdir/y && git add -A \
                  && git -c user.name=a -c user.email=a@localhost commit -qm agent \
                  && echo z > after-commit.txt";
    let command = sh_command(
        &fx,
        &policy,
        &["--json", "--snapshot", "git", "--verify", "false"],
        &repo,
        script,
    );
    let out = output(command).await;
    let report = json_report(&out);
    assert_eq!(report["decision"]["kind"], "rollback", "{report:#}");
    assert_eq!(report["rollback_unverified"], false, "{report:#}");

    assert_eq!(
        std::fs::read(&index_path).expect("index"),
        index_before,
        "the index file is restored byte for byte"
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(
        git(&repo, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/main"
    );
    assert_eq!(
        tree(&repo),
        files_before,
        "work tree restored, ignored file untouched"
    );
    assert_eq!(
        git(&repo, &["status", "--porcelain=v1", "-uall"]),
        status_before
    );
    assert_eq!(git(&repo, &["diff", "--cached"]), diff_cached_before);
    let refs = git(&repo, &["for-each-ref", "refs/airlock/"]);
    assert!(refs.contains("refs/airlock/snapshots/run_"), "{refs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cmd_driver_runs_the_given_commands_and_the_residue_check_catches_a_bad_rollback() {
    let fx = Fixture::new();
    let origin = ok_origin(&fx.origin_ca).await;
    let policy = write_policy(&fx, &loopback_policy(origin.addr().port()));
    let store = fx.dir.path().join("my-snapshots");
    let take = format!(
        "mkdir -p '{0}'/\"$AIRLOCK_SNAPSHOT\" && cp -a . '{0}'/\"$AIRLOCK_SNAPSHOT\"/",
        store.display()
    );
    let restore = format!(
        "find . -mindepth 1 -delete && cp -a '{0}'/\"$AIRLOCK_SNAPSHOT\"/. .",
        store.display()
    );
    let ws = workspace(&fx);
    let before = tree(&ws);
    let script = agent_script(origin.addr().port());

    // A rollback command that works: verified against the manifest.
    for (rollback, verified) in [(restore.as_str(), true), ("true", false)] {
        let command = sh_command(
            &fx,
            &policy,
            &[
                "--json",
                "--snapshot",
                "cmd",
                "--snapshot-cmd",
                &take,
                "--rollback-cmd",
                rollback,
                "--verify",
                "false",
            ],
            &ws,
            &script,
        );
        let report = json_report(&output(command).await);
        assert_eq!(report["decision"]["kind"], "rollback", "{report:#}");
        assert_eq!(report["workspace"]["driver"], "cmd");
        assert_eq!(report["rollback_unverified"], !verified, "{report:#}");
        if verified {
            assert_eq!(tree(&ws), before);
        } else {
            // The rollback command did nothing: the residue names every change.
            let residue = report["decision"]["residue"].to_string();
            assert!(residue.contains("left behind: added.txt"), "{residue}");
            assert!(residue.contains("differs: README"), "{residue}");
            assert!(residue.contains("missing: delete-me"), "{residue}");
        }
    }
    assert!(origin.received().is_empty());

    // A standalone server runs no snapshot commands unless told it may.
    let (airlock, run, _) = fx
        .start_run(&loopback_policy(origin.addr().port()), &[])
        .await;
    let refused = airlock
        .post(
            &format!("/v1/runs/{run}/workspace"),
            Some(json!({"path": ws.display().to_string(), "driver": "cmd",
                        "snapshot_cmd": "true", "rollback_cmd": "true"})),
        )
        .await
        .expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("danger-allow-snapshot-commands"),
        "{refused}"
    );
}
