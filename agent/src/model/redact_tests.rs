//! The redaction rules, form by form (`model/redact.rs`, `model/secret_args.rs`).
use super::*;

#[test]
fn secrets_are_masked_and_the_rest_is_kept() {
    for (raw, want) in [
        (
            "python train.py --hf_token=hf_abcdefghijklmnopqrstuvwx --lr 3e-4",
            "python train.py --hf_token=*** --lr 3e-4",
        ),
        ("python train.py --api-key sk-live-0123 --epochs 3", "python train.py --api-key *** --epochs 3"),
        (
            "env WANDB_API_KEY=abc123 DB_PASSWORD='p w' torchrun x.py",
            "env WANDB_API_KEY=*** DB_PASSWORD=*** torchrun x.py",
        ),
        ("curl -H Authorization: Bearer eyJabc.def.ghi http://x", "curl -H Authorization: *** *** http://x"),
        ("curl -H 'X: Bearer abc.def-ghi' http://x", "curl -H 'X: Bearer ***' http://x"),
        ("git clone https://user:s3cr3t@github.com/x/y", "git clone https://user:***@github.com/x/y"),
        (
            r#"launcher --env {"HF_TOKEN": "hf_x", "NCCL_DEBUG": "INFO", "aws_secret_access_key":"a\"b"}"#,
            r#"launcher --env {"HF_TOKEN": "***", "NCCL_DEBUG": "INFO", "aws_secret_access_key":"***"}"#,
        ),
        (r#"x --cfg {\"hf_token\": \"abc\", \"lr\": 1}"#, r#"x --cfg {\"hf_token\": \"***\", \"lr\": 1}"#),
        ("x {'api_key': 'abc', 'lr': '1'}", "x {'api_key': '***', 'lr': '1'}"),
        ("deploy ghp_0123456789abcdefghijABCDEFGHIJ now", "deploy *** now"),
        ("aws AKIAABCDEFGHIJKLMNOP", "aws ***"),
        (
            "python -m torch.distributed.run --nproc_per_node 8 train.py",
            "python -m torch.distributed.run --nproc_per_node 8 train.py",
        ),
    ] {
        assert_eq!(redact(raw), want, "{raw}");
    }
}

#[test]
fn nothing_secret_borrows_and_extra_patterns_apply() {
    assert!(matches!(redact("python train.py --lr 3e-4"), Cow::Borrowed(_)));
    let r = Redaction::with_extra(&["corp-[0-9]{4}".into()]).expect("valid");
    assert_eq!(r.redact("run --id corp-1234 --token=x"), "run --id *** --token=***");
    let Err(e) = Redaction::with_extra(&["(".into()]) else { panic!("a bad pattern was accepted") };
    let e = e.to_string();
    assert!(e.starts_with("redaction pattern \"(\" is not a valid regular expression"), "{e}");
    assert!(!e.contains('\n') && e.ends_with("unclosed group"), "one line saying what is wrong: {e}");
}

#[test]
fn a_commands_arguments_are_masked_one_by_one_and_across_a_secret_flag() {
    let v = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    for (raw, want) in [
        (v("python train.py --hf_token=hf_SECRETabc123 --lr 3e-4"), v("python train.py --hf_token=*** --lr 3e-4")),
        (v("python train.py --hf_token hf_SECRETabc123 --lr 3e-4"), v("python train.py --hf_token *** --lr 3e-4")),
        (v("python x.py -password hunter2"), v("python x.py -password ***")),
        // A flag followed by another flag has no value to hide.
        (v("x --api-key --verbose"), v("x --api-key --verbose")),
        (v("env WANDB_API_KEY=abc123 torchrun x.py"), v("env WANDB_API_KEY=*** torchrun x.py")),
        (v("deploy ghp_0123456789abcdefghijABCDEFGHIJ"), v("deploy ***")),
        (
            vec!["launcher".into(), r#"{"HF_TOKEN": "hf_x"}"#.into()],
            vec!["launcher".into(), r#"{"HF_TOKEN": "***"}"#.into()],
        ),
        // The shell split a JSON blob: masked as one joined argument.
        (v(r#"launcher {"HF_TOKEN": "abc"}"#), vec![r#"launcher {"HF_TOKEN": "***"}"#.to_string()]),
        (v("torchrun --nproc_per_node 8 train.py"), v("torchrun --nproc_per_node 8 train.py")),
        (vec![], vec![]),
    ] {
        let got = redact_args(&raw);
        assert_eq!(got, want, "{raw:?}");
        assert_eq!(redact(&got.join(" ")), got.join(" "), "{raw:?}");
    }
}

#[test]
fn odd_input_never_panics() {
    for raw in
        ["", "=", "--token", "--token ", "\"token\":", "'key':'", "a://b:@", "\u{0}\u{ffff}token=\u{1F600}", "bearer "]
    {
        let _ = redact(raw);
    }
}

/// Every common form, masked in a command line; what is not the secret stays.
#[test]
fn the_common_secret_forms_are_masked() {
    for (raw, want) in [
        // Password flags: attached, with `=`, the next word, a value that begins with `-`.
        ("mysql -uroot -pS3cretPw db", "mysql -uroot -p*** db"),
        ("/usr/bin/mysqldump -h db -pS3cretPw --all", "/usr/bin/mysqldump -h db -p*** --all"),
        ("mariadb -pS3cretPw", "mariadb -p***"),
        // A password with a secret word in it is a value, not a flag naming the next word.
        ("mysql -pMYsecretKEY curl https://x", "mysql -p*** curl https://x"),
        ("curl -u bob:my-api-key https://x", "curl -u bob:*** https://x"),
        ("mysql --password=S3cretPw db", "mysql --password=*** db"),
        ("mysql --password S3cretPw", "mysql --password ***"),
        ("psql --password -Xy7Secret", "psql --password ***"),
        ("app --api-key -Xy7Secret --epochs 3", "app --api-key *** --epochs 3"),
        ("sshpass -p S3cretPw ssh host", "sshpass -p *** ssh host"),
        ("sshpass -pS3cretPw ssh host", "sshpass -p*** ssh host"),
        ("mongosh -u admin -p S3cretPw", "mongosh -u admin -p ***"),
        ("redis-cli -h r -a S3cretPw ping", "redis-cli -h r -a *** ping"),
        ("ldapsearch -x -D cn=admin -w S3cretPw", "ldapsearch -x -D cn=admin -w ***"),
        ("sqlcmd -S db -U sa -P S3cretPw", "sqlcmd -S db -U sa -P ***"),
        ("unzip -P S3cretPw data.zip", "unzip -P *** data.zip"),
        ("7z x -pS3cretPw data.7z", "7z x -p*** data.7z"),
        ("openssl enc -d -pass pass:S3cretPw -in x", "openssl enc -d -pass pass:*** -in x"),
        // Environment settings on a command line.
        ("sh -c PGPASSWORD=S3cretPw psql -h db", "sh -c PGPASSWORD=*** psql -h db"),
        ("env MYSQL_PWD=S3cretPw mysql", "env MYSQL_PWD=*** mysql"),
        ("env AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG aws s3 ls", "env AWS_SECRET_ACCESS_KEY=*** aws s3 ls"),
        ("env REDISCLI_AUTH=S3cretPw redis-cli", "env REDISCLI_AUTH=*** redis-cli"),
        // Basic auth: user:password after -u/--user, and in a URL.
        ("curl -u alice:S3cretPw https://x", "curl -u alice:*** https://x"),
        ("curl -ualice:S3cretPw https://x", "curl -ualice:*** https://x"),
        ("curl --user=alice:S3cretPw https://x", "curl --user=alice:*** https://x"),
        ("curl --proxy-user alice:S3cretPw https://x", "curl --proxy-user alice:*** https://x"),
        ("git clone https://alice:S3c@ret@example.com/r", "git clone https://alice:***@example.com/r"),
        ("psql postgresql://app:S3cretPw@db:5432/x", "psql postgresql://app:***@db:5432/x"),
        // Signed URLs.
        (
            "azcopy copy https://a.blob.core.windows.net/c/f?sv=2022-11-02&se=2026&sp=r&sig=AbC%2Bd3fGh%3D x",
            "azcopy copy https://a.blob.core.windows.net/c/f?sv=2022-11-02&se=2026&sp=r&sig=*** x",
        ),
        (
            "curl https://b.s3.amazonaws.com/k?X-Amz-Expires=60&X-Amz-Signature=0a1b2c3d&X-Amz-Security-Token=FQoG",
            "curl https://b.s3.amazonaws.com/k?X-Amz-Expires=60&X-Amz-Signature=***&X-Amz-Security-Token=***",
        ),
        (
            "wget https://s.googleapis.com/o?X-Goog-Signature=9f8e7d",
            "wget https://s.googleapis.com/o?X-Goog-Signature=***",
        ),
        (
            "curl https://d.cloudfront.net/v?Expires=1&Signature=Zx-9~&p=K",
            "curl https://d.cloudfront.net/v?Expires=1&Signature=***&p=K",
        ),
        ("curl https://api.x/v1?access_token=ab12&page=2", "curl https://api.x/v1?access_token=***&page=2"),
        ("curl https://api.x/v1?token=ab12", "curl https://api.x/v1?token=***"),
        ("curl https://hooks.slack.com/services/T000/B000/XXXXyyyy", "curl https://hooks.slack.com/services/***"),
        // The providers' token shapes, with no key before them.
        ("bot xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp", "bot ***"),
        ("bot xoxp-1234-5678-abcdefabcdef", "bot ***"),
        ("bot xapp-1-A0123-456-abcdef0123", "bot ***"),
        ("git push https://oauth2@gitlab.com x glpat-AbCdEfGhIj0123456789", "git push https://oauth2@gitlab.com x ***"),
        ("x github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "x ***"),
        ("x ghs_0123456789abcdefghijABCDEFGHIJ", "x ***"),
        ("x sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv-wx", "x ***"),
        ("x sk-proj-AbCdEfGhIjKlMnOpQrStUvWx", "x ***"),
        ("x hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "x ***"),
        ("x AKIAIOSFODNN7EXAMPLE", "x ***"),
        ("x eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.SflKxwRJSMeKKF2QT4fwpM", "x ***"),
        ("x AIzaSyA-0123456789abcdefghijklmnopqrstu", "x ***"),
        ("x sk_live_0123456789abcdefXYZ", "x ***"),
        ("x npm_0123456789abcdefghijABCDEFGHIJ012345", "x ***"),
        ("x dapi0123456789abcdef0123456789abcdef", "x ***"),
    ] {
        assert_eq!(redact(raw), want, "{raw}");
        assert_eq!(redact(want), want, "masking again changes nothing: {want}");
    }
}

/// Ordinary training and tool arguments stay as they are: a port after `-p` (only a known
/// tool's `-p` is a password), the model's token settings, a uid:gid, a host:path.
#[test]
fn ordinary_arguments_are_kept() {
    for raw in [
        "python train.py --lr 0.1 -p 8080 --batch-size 32",
        "ssh -p 2222 host",
        "docker run -p 8080:80 -u 1000:1000 img",
        "python -u train.py --max_new_tokens 256 --max-tokens=512 --num_tokens 8",
        "python gen.py --tokenizer meta-llama/Llama-3 --tokenizer_name gpt2 --pad_token_id 0",
        "python gen.py --pad_token <pad> --eos_token </s> --key_dim 64 --author bob",
        "rsync -u host:/data /dst",
        "mysql -p db",
        "mysql -P 3306 -h db",
        "cd $PWD && PWD=/home/a make",
        "x --api-key --verbose",
        "torchrun --nproc_per_node 8 --master_port 29500 train.py --signal-file /tmp/s",
    ] {
        assert_eq!(redact(raw), raw, "{raw}");
        assert!(matches!(redact(raw), Cow::Borrowed(_)), "{raw}");
    }
}

/// A secret key still wins when an ordinary word is part of it.
#[test]
fn a_secret_key_with_an_ordinary_word_in_it_is_still_secret() {
    for raw in ["--tokenizer-auth-token", "HF_HUB_TOKEN", "--max-tokens-api-key", "AUTHORIZATION"] {
        assert!(crate::model::secret_args::secret_key(raw), "{raw}");
    }
    for raw in ["--max_new_tokens", "--tokenizer", "--key-dim", "PWD", "--author", "--keywords"] {
        assert!(!crate::model::secret_args::secret_key(raw), "{raw}");
    }
}

/// A command's own arguments (`record -- CMD`) keep their shape when each secret is one
/// argument or follows one.
#[test]
fn a_commands_password_arguments_are_masked_in_place() {
    let v = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    for (raw, want) in [
        (v("mysql -pS3cretPw -e select"), v("mysql -p*** -e select")),
        (v("curl -u alice:S3cretPw https://x"), v("curl -u alice:*** https://x")),
        (v("sshpass -p S3cretPw ssh host"), v("sshpass -p *** ssh host")),
        (v("app --password -Xy7Secret"), v("app --password ***")),
        (v("slack xoxb-123456789012-AbCdEfGhIj"), v("slack ***")),
        (v("python train.py -p 8080 --max_new_tokens 16"), v("python train.py -p 8080 --max_new_tokens 16")),
    ] {
        let got = redact_args(&raw);
        assert_eq!(got, want, "{raw:?}");
        assert_eq!(redact(&got.join(" ")), got.join(" "), "{raw:?}");
    }
}
