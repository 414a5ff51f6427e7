// Live tests against a real server process. tests/clients/test_js_clients_live.py starts gunicorn on the
// test database, creates the domains and keys, and runs this file with their values in the environment;
// without them (a plain `node --test test/`) these tests are skipped.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { MailService, MailServiceError, SendingPausedError, ServiceUnavailableError } from "../src/index.js";
import { ServerClient } from "../src/postmark.js";
import { Resend } from "../src/resend.js";
import { MailService as SendGridMailService } from "../src/sendgrid.js";
import { SESv2Client, SESv2ServiceException, SendEmailCommand } from "../src/sesv2.js";

const env = process.env;
const live = Boolean(env.LIVE_BASE_URL);
const TO = ["a@example.org", "Bee <b@example.org>"];
const CC = "c@example.org";

/** Each style sends one message and resolves its id; `base` is where it goes and with which key. */
const STYLES = {
  async native({ baseUrl, key, from }, subject) {
    const client = new MailService({ apiKey: key, baseUrl });
    return (await client.send({ from, to: TO, cc: CC, subject, text: `Body of ${subject}` })).id;
  },
  async sesv2({ baseUrl, key, from }, subject) {
    const client = new SESv2Client({ region: "us-east-1", endpoint: baseUrl, apiKey: key });
    const out = await client.send(
      new SendEmailCommand({
        FromEmailAddress: from,
        Destination: { ToAddresses: TO, CcAddresses: [CC] },
        Content: { Simple: { Subject: { Data: subject }, Body: { Text: { Data: `Body of ${subject}` } } } },
      }),
    );
    assert.equal(out.$metadata.httpStatusCode, 200);
    assert.equal(out.$metadata.attempts, 1);
    assert.equal(out.$metadata.totalRetryDelay, 0);
    assert.ok(out.$metadata.requestId);
    return out.MessageId;
  },
  async postmark({ baseUrl, key, from }, subject) {
    const client = new ServerClient(key, { baseUrl });
    const out = await client.sendEmail({
      From: from,
      To: TO.join(", "),
      Cc: CC,
      Subject: subject,
      TextBody: `Body of ${subject}`,
      MessageStream: "outbound",
    });
    assert.equal(out.ErrorCode, 0);
    assert.equal(out.Message, "OK");
    assert.equal(out.To, TO.join(", "));
    assert.ok(!Number.isNaN(Date.parse(out.SubmittedAt)));
    return out.MessageID;
  },
  async resend({ baseUrl, key, from }, subject) {
    const client = new Resend(key, { baseUrl });
    const out = await client.emails.send({ from, to: TO, cc: CC, subject, text: `Body of ${subject}` });
    assert.equal(out.error, null);
    assert.ok(out.headers["x-request-id"]);
    return out.data.id;
  },
  async sendgrid({ baseUrl, key, from }, subject) {
    const sgMail = new SendGridMailService();
    sgMail.setApiKey(key);
    sgMail.setBaseUrl(baseUrl);
    const [response, body] = await sgMail.send({
      from,
      to: [TO[0], { email: "b@example.org", name: "Bee" }],
      cc: { email: CC },
      subject,
      text: `Body of ${subject}`,
    });
    assert.equal(response.statusCode, 202);
    assert.equal(response.body, "");
    assert.equal(body, "");
    return response.headers["x-message-id"];
  },
};

/** What each style's documented error form says: [code, HTTP status, request id]. */
async function failureOf(style, target) {
  if (style === "resend") {
    // HTTP errors come back in `error`, never thrown.
    const client = new Resend(target.key, { baseUrl: target.baseUrl });
    const out = await client.emails.send({ from: target.from, to: TO, subject: "must fail", text: "x" });
    assert.equal(out.data, null);
    return [out.error.name, out.error.statusCode, out.error.requestId];
  }
  let failure;
  await assert.rejects(STYLES[style](target, "must fail"), (error) => {
    if (style === "sesv2") {
      assert.ok(error instanceof SESv2ServiceException, String(error));
      assert.equal(error.$metadata.attempts, 1);
      failure = [error.name, error.$metadata.httpStatusCode, error.$metadata.requestId];
    } else {
      assert.ok(error instanceof MailServiceError, String(error));
      failure = [error.code, error.status, error.requestId];
    }
    return true;
  });
  return failure;
}

describe("every style against a real server", { skip: !live && "LIVE_BASE_URL is not set" }, () => {
  const good = { baseUrl: env.LIVE_BASE_URL, key: env.LIVE_KEY, from: `App <app@${env.LIVE_DOMAIN}>` };
  const reader = live && new MailService({ apiKey: env.LIVE_KEY, baseUrl: env.LIVE_BASE_URL });

  for (const style of Object.keys(STYLES)) {
    test(`${style} sends a message that reads back through GET`, async () => {
      const subject = `Hello from ${style}`;
      const id = await STYLES[style](good, subject);
      const message = await reader.messages.get(id);
      assert.equal(message.from, good.from);
      assert.deepEqual(message.to, TO);
      assert.equal(message.subject, subject);
      assert.equal(message.text, `Body of ${subject}`);
    });

    test(`${style}: a paused service, a bad key and a foreign sender`, async () => {
      const paused = { ...good, key: env.LIVE_PAUSED_KEY, from: `app@${env.LIVE_PAUSED_DOMAIN}` };
      const [pausedCode, pausedStatus, pausedRequestId] = await failureOf(style, paused);
      assert.deepEqual([pausedCode, pausedStatus], ["SendingPaused", 503]);
      assert.ok(pausedRequestId);
      const badKey = { ...good, key: "ms_not_a_real_key" };
      assert.deepEqual((await failureOf(style, badKey)).slice(0, 2), ["Unauthorized", 401]);
      const foreign = { ...good, from: "app@elsewhere.example.net" };
      assert.deepEqual((await failureOf(style, foreign)).slice(0, 2), ["SenderNotAllowed", 403]);
    });
  }

  test("the native client iterates every message across pages", async () => {
    const ids = [];
    for await (const message of reader.messages.iter({ limit: 2, direction: "sent" })) ids.push(message.id);
    assert.equal(new Set(ids).size, ids.length);
    assert.ok(ids.length >= Object.keys(STYLES).length);
  });
});

describe("a paused domain and an outage are different errors", { skip: !env.LIVE_DOWN_BASE_URL && "LIVE_DOWN_BASE_URL is not set" }, () => {
  const send = (baseUrl, key, domain) =>
    new MailService({ apiKey: key, baseUrl }).send({ from: `app@${domain}`, to: TO, subject: "s", text: "t" });

  test("SendingPaused is a SendingPausedError; a database outage is a ServiceUnavailableError", async () => {
    await assert.rejects(send(env.LIVE_BASE_URL, env.LIVE_PAUSED_KEY, env.LIVE_PAUSED_DOMAIN), (error) => {
      assert.ok(error instanceof SendingPausedError, `${error}`);
      return true;
    });
    // A server whose database is unreachable: the key cannot even be looked up.
    await assert.rejects(send(env.LIVE_DOWN_BASE_URL, env.LIVE_KEY, env.LIVE_DOMAIN), (error) => {
      assert.ok(error instanceof ServiceUnavailableError, `${error}`);
      assert.ok(!(error instanceof SendingPausedError));
      assert.deepEqual([error.code, error.status], ["ServiceUnavailable", 503]);
      assert.ok(error.requestId);
      return true;
    });
  });
});
