"""/v1/secrets through the app: a value goes in and never comes out; admin keys only."""

from __future__ import annotations

import httpx

VALUE = "sk-live-0123456789abcdef"


async def test_secret_round_trip_never_answers_the_value(client: httpx.AsyncClient) -> None:
    put = await client.put("/v1/secrets/OPENAI_API_KEY", json={"value": VALUE, "preset": "openai"})
    assert put.status_code == 200, put.text
    answers = [put]
    answers.append(await client.get("/v1/secrets"))
    answers.append(await client.get("/v1/secrets/OPENAI_API_KEY"))
    answers.append(
        await client.post("/v1/secrets/OPENAI_API_KEY/rotate", json={"value": VALUE + "2"})
    )
    answers.append(await client.get("/v1/secrets/log"))
    answers.append(await client.get("/openapi.json"))
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert VALUE not in answer.text
    listed = answers[1].json()["secrets"]
    assert [(s["name"], s["preset"], s["hosts"], s["header"]) for s in listed] == [
        ("OPENAI_API_KEY", "openai", ["api.openai.com"], "authorization")
    ]
    assert "value" not in listed[0] and "sealed" not in listed[0]

    bad = await client.put("/v1/secrets/API", json={"value": "v", "preset": "http"})
    assert bad.status_code == 400 and "needs the hosts" in bad.json()["message"]
    revoke = await client.delete("/v1/sandboxes/sb-nope/secrets/OPENAI_API_KEY")
    assert revoke.status_code == 404
    unknown = await client.post("/v1/sandboxes", json={"secrets": ["MISSING"]})
    assert unknown.status_code == 400 and "secret 'MISSING' not found" in unknown.text

    assert (await client.delete("/v1/secrets/OPENAI_API_KEY")).status_code == 204
    assert (await client.get("/v1/secrets/OPENAI_API_KEY")).status_code == 404
