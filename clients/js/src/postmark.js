// `postmark` look-alike: `new ServerClient(token, { baseUrl }).sendEmail({ From, To, ... })`, sent as a native send.
// Migration: import from "mailservice-client/postmark" instead of "postmark"; pass `{ baseUrl }` (the
// service's base URL) or set the MAILSERVICE_* environment.

import { ValidationError } from "./errors.js";
import { request, resolveConfig } from "./http.js";
import { checkLength, nativeSend, require, screen, splitAddresses } from "./compat.js";

const UNSUPPORTED = [
  "Tag",
  "Headers",
  "TrackOpens",
  "TrackLinks",
  "Attachments",
  "Metadata",
  "TemplateId",
  "TemplateAlias",
  "TemplateModel",
  "InlineCss",
];
const NAMES = {
  from: "From",
  to: "To",
  cc: "Cc",
  bcc: "Bcc",
  replyTo: "ReplyTo",
  subject: "Subject",
  text: "TextBody",
  html: "HtmlBody",
};
const MAX_ADDRESS_STRING = 16000;
const MAX_REPLY_TO_STRING = 3200;
const MAX_SUBJECT = 2000;

/**
 * The native send body for `sendEmail(message)`.
 * @param {unknown} input
 */
export function toSendRequest(input) {
  const message = screen(input, {
    allowed: ["From", "To", "Cc", "Bcc", "ReplyTo", "Subject", "TextBody", "HtmlBody", "MessageStream"],
    unsupported: UNSUPPORTED,
  });
  /** @type {Record<string, unknown>} */
  const body = { from: require(message, "From", "From") };
  const to = require(message, "To", "To");
  checkLength(to, "To", { minLength: 3, maxLength: MAX_ADDRESS_STRING });
  body.to = splitAddresses(to, "To");
  for (const [key, name] of [["Cc", "cc"], ["Bcc", "bcc"]]) {
    if (!Object.hasOwn(message, key)) continue;
    checkLength(message[key], key, { maxLength: MAX_ADDRESS_STRING });
    body[name] = splitAddresses(message[key], key);
  }
  if (Object.hasOwn(message, "ReplyTo")) {
    checkLength(message.ReplyTo, "ReplyTo", { maxLength: MAX_REPLY_TO_STRING });
    body.replyTo = splitAddresses(message.ReplyTo, "ReplyTo");
  }
  const subject = message.Subject ?? "";
  checkLength(subject, "Subject", { maxLength: MAX_SUBJECT });
  body.subject = subject;
  for (const [key, name] of [["TextBody", "text"], ["HtmlBody", "html"]]) {
    if (Object.hasOwn(message, key)) body[name] = message[key];
  }
  if ((message.MessageStream ?? "outbound") !== "outbound") {
    throw new ValidationError("MessageStream", "only the 'outbound' stream is supported");
  }
  return nativeSend(body, NAMES);
}

export class ServerClient {
  /** @type {import("./http.js").Config} */
  #config;

  /**
   * @param {string} [serverToken]
   * @param {import("./postmark.js").ClientOptions} [options]
   */
  constructor(serverToken, { baseUrl, timeout } = {}) {
    this.#config = resolveConfig({ apiKey: serverToken, baseUrl, timeout });
  }

  /** Resolves `{ To, SubmittedAt, MessageID, ErrorCode: 0, Message: "OK" }`; callbacks are not supported. */
  /**
   * @param {import("./postmark.js").Message} message
   * @param {unknown[]} rest
   */
  async sendEmail(message, ...rest) {
    if (rest.length > 0) throw new ValidationError("callback", "callbacks are not supported; use the promise");
    const reply = await request(this.#config, "POST", "/v1/send", { body: toSendRequest(message) });
    return { To: message.To, SubmittedAt: reply.data.created_at, MessageID: reply.data.id, ErrorCode: 0, Message: "OK" };
  }
}

export { ServerClient as Client };
