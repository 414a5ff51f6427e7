// The JS client without a server: configuration, error mapping, and what it never sends.
// A counting TCP listener stands in for the network peer where the test is about how many
// connections the client opens (none for invalid input, exactly one for a failed send).

import assert from "node:assert/strict";
import { createServer } from "node:net";
import { afterEach, beforeEach, test } from "node:test";

import {
  AuthenticationError,
  BadRequestError,
  ConfigurationError,
  InternalServerError,
  MailService,
  MailServiceConnectionError,
  MailServiceError,
  MethodNotAllowedError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
  RequestTooLargeError,
  ServiceUnavailableError,
  ValidationError,
  errorFromResponse,
} from "../src/index.js";
import { ServerClient } from "../src/postmark.js";
import { Resend } from "../src/resend.js";
import sgMail from "../src/sendgrid.js";
import { SESv2Client, SendEmailCommand } from "../src/sesv2.js";

const VALID = { from: "a@acme.example.com", to: "b@example.org", subject: "Hi", text: "x" };
let listener;
let connections;
let baseUrl;

beforeEach(async () => {
  connections = 0;
  listener = createServer((socket) => {
    connections += 1;
    socket.once("data", () => socket.destroy());
  });
  await new Promise((resolve) => listener.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${listener.address().port}`;
});

afterEach(() => new Promise((resolve) => listener.close(resolve)));

test("a failed send is never resent", async () => {
  const client = new MailService({ apiKey: "key", baseUrl });
  await assert.rejects(client.send(VALID), (error) => {
    assert.ok(error instanceof MailServiceConnectionError);
    assert.equal(error.status, null);
    assert.match(error.message, /not resent/);
    return true;
  });
  assert.equal(connections, 1);
});

test("invalid input fails locally before any request", async () => {
  const client = new MailService({ apiKey: "key", baseUrl });
  const calls = [
    () => client.send({ ...VALID, to: "not-an-address" }),
    () => client.messages.list({ limit: 0 }),
    () => client.messages.list({ limit: 101 }),
    () => client.messages.list({ after: "" }),
    () => client.messages.list({ after: "c".repeat(513) }),
    () => client.messages.list({ direction: "sideways" }),
    () => client.messages.get(""),
    () => client.messages.get("m".repeat(257)),
    () => new Resend("key", { baseUrl }).emails.send({ ...VALID, scheduledAt: "tomorrow" }),
    () => new Resend("key", { baseUrl }).emails.send(VALID, { headers: { "X-Tag": "k" } }),
    () => new Resend("key", { baseUrl }).emails.send(VALID, { idempotencyKey: "" }),
    () => client.send(VALID, { idempotencyKey: "k".repeat(257) }),
    () => client.sendBatch([]),
    () => client.sendBatch(Array(501).fill(VALID)),
    () => client.sendBatch([VALID, { ...VALID, to: "not-an-address" }]),
    () => new ServerClient("key", { baseUrl }).sendEmail({ From: VALID.from, To: VALID.to, TextBody: "x" }, () => {}),
    () => new SESv2Client({ endpoint: baseUrl, apiKey: "key" }).send({ input: {} }),
    () => new SESv2Client({ endpoint: baseUrl, apiKey: "key" }).send(new SendEmailCommand({ EmailTags: [] })),
  ];
  for (const call of calls) await assert.rejects(call(), ValidationError);
  sgMail.setApiKey("key");
  sgMail.setBaseUrl(baseUrl);
  await assert.rejects(sgMail.send([VALID]), ValidationError);
  await assert.rejects(sgMail.send(VALID, false, () => {}), ValidationError);
  class Mail {}
  await assert.rejects(sgMail.send(new Mail()), /helper objects are not supported/);
  assert.equal(connections, 0);
});

test("a refused batch item is named before any request", async () => {
  const client = new MailService({ apiKey: "key", baseUrl });
  await assert.rejects(client.sendBatch([VALID, VALID, { ...VALID, to: "not-an-address" }]), (error) => {
    assert.equal(error.field, "messages.2.to");
    return error instanceof ValidationError;
  });
  assert.equal(connections, 0);
});

test("the resend style returns transport failures in `error`", async () => {
  const out = await new Resend("key", { baseUrl }).emails.send(VALID);
  assert.equal(out.data, null);
  assert.equal(out.error.name, "ConnectionError");
  assert.equal(out.error.statusCode, null);
  assert.equal(out.headers, null);
  assert.equal(connections, 1);
});

test("without a key or base URL the client says which is missing", (t) => {
  const saved = { key: process.env.MAILSERVICE_API_KEY, url: process.env.MAILSERVICE_BASE_URL };
  t.after(() => {
    for (const [name, value] of [["MAILSERVICE_API_KEY", saved.key], ["MAILSERVICE_BASE_URL", saved.url]]) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });
  delete process.env.MAILSERVICE_API_KEY;
  delete process.env.MAILSERVICE_BASE_URL;
  assert.throws(() => new MailService({ baseUrl }), /MAILSERVICE_API_KEY/);
  assert.throws(() => new ServerClient("key"), ConfigurationError);
  process.env.MAILSERVICE_API_KEY = "key";
  assert.throws(() => new SESv2Client({ region: "us-east-1" }), /MAILSERVICE_BASE_URL/);
  assert.throws(() => new MailService({ baseUrl: "mail.example.com" }), /http:\/\/ or https:\/\//);
  process.env.MAILSERVICE_BASE_URL = baseUrl;
  assert.ok(new Resend());
});

test("an envelope with an unknown code becomes the error of its status", () => {
  const cases = [
    [400, BadRequestError],
    [401, AuthenticationError],
    [403, PermissionDeniedError],
    [404, NotFoundError],
    [413, RequestTooLargeError],
    [429, RateLimitError],
    [405, MethodNotAllowedError],
    [500, InternalServerError],
    [503, ServiceUnavailableError],
    [418, MailServiceError],
  ];
  const body = JSON.stringify({ error: { code: "SomeCode", message: "what happened", request_id: "req_1" } });
  for (const [status, ErrorClass] of cases) {
    const error = errorFromResponse(status, { "x-request-id": "req_1", "retry-after": "7" }, body);
    assert.equal(error.constructor, ErrorClass);
    assert.deepEqual([error.status, error.code, error.message, error.requestId], [status, "SomeCode", "what happened", "req_1"]);
    assert.equal(error.name, ErrorClass.name);
  }
  assert.equal(errorFromResponse(429, { "retry-after": "12" }, body).retryAfter, 12);
  assert.equal(errorFromResponse(429, {}, body).retryAfter, null);
});

test("a body without the envelope still gives status and request id", () => {
  const error = errorFromResponse(502, { "x-request-id": "req_2" }, "<html>Bad gateway</html>");
  assert.deepEqual([error.constructor, error.code, error.status, error.requestId], [ServiceUnavailableError, "Http502", 502, "req_2"]);
});
