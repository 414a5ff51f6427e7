// Idempotent sends against a real server (tests/clients/test_js_clients_live.py runs this file with
// LIVE_BASE_URL, LIVE_KEY and LIVE_DOMAIN set; without them it is skipped).

import assert from "node:assert/strict";
import { test } from "node:test";

import { MailService, MailServiceError } from "../src/index.js";
import { Resend } from "../src/resend.js";

const env = process.env;
const live = Boolean(env.LIVE_BASE_URL);

test("the native client's idempotencyKey sends once and replays", { skip: !live }, async () => {
  const client = new MailService({ apiKey: env.LIVE_KEY, baseUrl: env.LIVE_BASE_URL });
  const body = { from: `app@${env.LIVE_DOMAIN}`, to: "a@example.org", subject: "Once", text: "x" };
  const first = await client.send(body, { idempotencyKey: "js-native-1" });
  const again = await client.send(body, { idempotencyKey: "js-native-1" });
  assert.equal(again.id, first.id);
  await assert.rejects(
    client.send({ ...body, subject: "Other" }, { idempotencyKey: "js-native-1" }),
    (error) => error instanceof MailServiceError && error.code === "IdempotencyKeyReused" && error.status === 409,
  );
  await assert.rejects(client.send(body, { idempotencyKey: "" }), /idempotencyKey/);
});

test("the Resend-style client takes resend's idempotencyKey option", { skip: !live }, async () => {
  const resend = new Resend(env.LIVE_KEY, { baseUrl: env.LIVE_BASE_URL });
  const payload = { from: `app@${env.LIVE_DOMAIN}`, to: ["b@example.org"], subject: "Once", text: "x" };
  const first = await resend.emails.send(payload, { idempotencyKey: "js-resend-1" });
  const again = await resend.emails.send(payload, { idempotencyKey: "js-resend-1" });
  assert.equal(first.error, null);
  assert.equal(again.data.id, first.data.id);
  assert.equal(again.headers["idempotent-replayed"], "true");
});

test("the native client's sendBatch sends in order, once per idempotencyKey, naming a refused item", { skip: !live }, async () => {
  const client = new MailService({ apiKey: env.LIVE_KEY, baseUrl: env.LIVE_BASE_URL });
  const batch = [0, 1, 2].map((n) => ({ from: `app@${env.LIVE_DOMAIN}`, to: "a@example.org", subject: `b${n}`, text: "x" }));
  const first = await client.sendBatch(batch, { idempotencyKey: "js-batch-1" });
  const again = await client.sendBatch(batch, { idempotencyKey: "js-batch-1" });
  assert.equal(first.length, 3);
  assert.deepEqual(again, first);
  await assert.rejects(
    client.sendBatch([...batch, { ...batch[0], from: "eve@elsewhere.example" }]),
    (error) => error.code === "SenderNotAllowed" && error.status === 403 && error.message.startsWith("messages.3.from: "),
  );
});
