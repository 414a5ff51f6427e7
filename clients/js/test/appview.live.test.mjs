// Suppressions and events against a real server process: tests/clients/test_js_clients_live.py starts it and
// sets LIVE_APPVIEW_BASE_URL and a key with every permission; without them these tests are skipped.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { MailService, NotFoundError, ValidationError } from "../src/index.js";

const env = process.env;

describe("suppressions and events", { skip: !env.LIVE_APPVIEW_BASE_URL && "LIVE_APPVIEW_BASE_URL is not set" }, () => {
  const client = new MailService({ apiKey: env.LIVE_APPVIEW_KEY, baseUrl: env.LIVE_APPVIEW_BASE_URL });

  test("add, get, list page after page, and remove a suppression", async () => {
    const added = await client.suppressions.add("Blocked <Blocked@Example.org>", { detail: "asked" });
    for (const n of [0, 1, 2]) await client.suppressions.add(`more${n}@example.org`);
    assert.deepEqual(await client.suppressions.add("blocked@example.org", { detail: "other" }), added);
    assert.equal(added.email, "blocked@example.org");
    assert.equal((await client.suppressions.get("BLOCKED@example.org")).detail, "asked");
    const every = [];
    for await (const entry of client.suppressions.iter({ limit: 1 })) every.push(entry.email);
    assert.deepEqual(every.sort(), ["blocked@example.org", "more0@example.org", "more1@example.org", "more2@example.org"]);
    assert.equal((await client.suppressions.list({ reason: "manual", email: "more1@example.org" })).data.length, 1);
    await client.suppressions.remove("blocked@example.org");
    await assert.rejects(client.suppressions.get("blocked@example.org"), NotFoundError);
    await assert.rejects(client.suppressions.remove("blocked@example.org"), NotFoundError);
  });

  test("a message's events and the stream, filtered by repeated types", async () => {
    const { id } = await client.send({ from: `app@${env.LIVE_APPVIEW_DOMAIN}`, to: "x@example.org", subject: "e", text: "x" });
    const history = await client.messageEvents(id);
    assert.deepEqual(history.map((event) => event.type), ["email.accepted"]);
    const stream = [];
    for await (const event of client.events({ types: ["email.accepted", "email.delivered"], since: new Date(0), limit: 1 })) {
      stream.push(event.id);
    }
    assert.deepEqual(stream, [history[0].id]);
  });

  test("bad input fails locally", async () => {
    await assert.rejects(client.suppressions.list({ reason: "bounce" }), ValidationError);
    await assert.rejects(client.eventsPage({ types: ["email.nope"] }), ValidationError);
    await assert.rejects(client.suppressions.add("a@example.org", { detail: "x".repeat(501) }), ValidationError);
  });
});
