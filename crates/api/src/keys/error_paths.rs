//! Every refusal of `/v1/api-keys` that needs no write to the cluster, in process
//! (`crate::testing`). None of them reaches the API server.

use serde_json::json;

use crate::testing::*;

#[tokio::test]
async fn only_an_admin_key_manages_keys() {
    let api = World::default().start();
    for (method, path, body) in [
        ("GET", "/v1/api-keys", None),
        (
            "POST",
            "/v1/api-keys",
            Some(r#"{"name": "ci", "scopes": ["read"]}"#),
        ),
        // Neither a malformed body nor an array is looked at before the scope.
        ("POST", "/v1/api-keys", Some("{")),
        ("POST", "/v1/api-keys", Some(r#"["ci", ["admin"]]"#)),
        ("DELETE", "/v1/api-keys/key-read", None),
    ] {
        let c = || match body {
            Some(body) => call(method, path).json(body),
            None => call(method, path),
        };
        api.send(c().build()).await.error(401, "unauthenticated");
        for key in [READ, WRITE, EXECUTE, NO_SCOPE] {
            let answer = api.send(c().key(key).build()).await;
            answer.error(403, "insufficient_scope");
            assert!(answer.message().contains("`admin`"));
        }
    }
    api.assert_untouched();
}

#[tokio::test]
async fn a_key_is_refused_on_each_field_it_gets_wrong() {
    let api = World::default().start();
    let send = |c: Call| api.send(c.key(ADMIN).build());
    send(call("POST", "/v1/api-keys").body(r#"{"name":"ci","scopes":["read"]}"#))
        .await
        .error(415, "unsupported_media_type");
    send(call("POST", "/v1/api-keys").json(vec![b' '; (1 << 20) + 1]))
        .await
        .error(413, "payload_too_large");
    send(call("POST", "/v1/api-keys").json(r#"{"name":"ci","#))
        .await
        .error(400, "invalid_json");
    for (body, fields) in [
        // An admin key from an array of the fields: refused.
        (json!(["ci", ["admin"]]), vec!["body"]),
        (json!("ci"), vec!["body"]),
        (json!({"scopes": ["read"]}), vec!["name"]),
        (json!({"name": "ci"}), vec!["scopes"]),
        (json!({"name": "ci", "scopes": "read"}), vec!["scopes"]),
        (json!({"name": "ci", "scopes": ["root"]}), vec!["scopes[0]"]),
        (
            json!({"name": "ci", "scopes": ["read"], "expires": 1}),
            vec!["expires"],
        ),
        (json!({"name": " ", "scopes": ["read"]}), vec!["name"]),
        (
            json!({"name": "n".repeat(201), "scopes": ["read"]}),
            vec!["name"],
        ),
        (json!({"name": "ci", "scopes": []}), vec!["scopes"]),
        (json!({"name": "", "scopes": []}), vec!["name", "scopes"]),
    ] {
        let answer = send(call("POST", "/v1/api-keys").value(body.clone())).await;
        answer.error(400, "validation_error");
        assert_eq!(answer.fields(), fields, "{body}");
    }
    api.assert_untouched();
}

#[tokio::test]
async fn unknown_keys_are_not_found_as_other_accounts_keys_are() {
    let api = World::default().start();
    for id in ["key-nope", "key-other", "KEY-READ"] {
        api.send(
            call("DELETE", &format!("/v1/api-keys/{id}"))
                .key(ADMIN)
                .build(),
        )
        .await
        .error(404, "api_key_not_found");
    }
    for (query, code) in [
        ("limit=0", "validation_error"),
        ("cursor=x", "invalid_cursor"),
    ] {
        api.send(
            call("GET", &format!("/v1/api-keys?{query}"))
                .key(ADMIN)
                .build(),
        )
        .await
        .error(400, code);
    }
    api.send(call("GET", "/v1/api-keys/key-read").key(ADMIN).build())
        .await
        .error(405, "method_not_allowed");
    api.assert_untouched();
}

#[tokio::test]
async fn every_key_reads_its_own_scopes_and_nothing_else() {
    let api = World::default().start();
    api.send(call("GET", "/v1/me").build())
        .await
        .error(401, "unauthenticated");
    for (key, id, scopes) in [
        (READ, "key-read", json!(["read"])),
        (WRITE, "key-write", json!(["write"])),
        (EXECUTE, "key-execute", json!(["execute"])),
        (ADMIN, "key-admin", json!(["admin"])),
        (OTHER_ADMIN, "key-other", json!(["admin"])),
    ] {
        let answer = api.send(call("GET", "/v1/me").key(key).build()).await;
        assert_eq!(answer.status, 200, "{key}");
        assert_eq!(answer.body["id"], id);
        assert_eq!(answer.body["scopes"], scopes);
        assert!(!answer.raw.windows(key.len()).any(|w| w == key.as_bytes()));
    }
    api.send(call("GET", "/v1/me").key(NO_SCOPE).build())
        .await
        .error(403, "insufficient_scope");
    api.assert_untouched();
}
