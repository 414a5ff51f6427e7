// The native client: `new MailService({ apiKey, baseUrl })`, falling back to MAILSERVICE_API_KEY and
// MAILSERVICE_BASE_URL.

import { ValidationError } from "./errors.js";
import { idempotencyHeaders, request, resolveConfig } from "./http.js";
import { checkSend, checkString } from "./validate.js";

export * from "./errors.js";

function listQuery({ limit, after, direction } = {}) {
  if (limit !== undefined && (!Number.isInteger(limit) || limit < 1 || limit > 100)) {
    throw new ValidationError("limit", "must be an integer from 1 to 100");
  }
  if (after !== undefined && (typeof after !== "string" || after.length < 1 || after.length > 512)) {
    throw new ValidationError("after", "must be a string of 1 to 512 characters");
  }
  if (direction !== undefined && direction !== "sent" && direction !== "received") {
    throw new ValidationError("direction", "must be 'sent' or 'received'");
  }
  return { limit, after, direction };
}

class Messages {
  #config;

  constructor(config) {
    this.#config = config;
  }

  /** One page: `{ data, has_more, next_cursor }`. */
  async list(options = {}) {
    return (await request(this.#config, "GET", "/v1/messages", { query: listQuery(options) })).data;
  }

  /** Every page in turn, following `next_cursor`: `for await (const page of client.messages.pages())`. */
  async *pages({ limit, direction } = {}) {
    let after;
    for (;;) {
      const page = await this.list({ limit, after, direction });
      yield page;
      after = page.next_cursor;
      if (!page.has_more || !after) return;
    }
  }

  async get(id) {
    checkString(id, "id", { maxLength: 256, allowBlank: false });
    return (await request(this.#config, "GET", `/v1/messages/${encodeURIComponent(id)}`)).data;
  }
}

export class MailService {
  #config;

  constructor({ apiKey, baseUrl, timeout } = {}) {
    this.#config = resolveConfig({ apiKey, baseUrl, timeout });
    this.messages = new Messages(this.#config);
  }

  /** Send one message; `params` are the wire fields (`from`, `to`, `subject`, `text`, `template`, ...). */
  async send(params, { idempotencyKey } = {}) {
    const headers = idempotencyHeaders(idempotencyKey);
    return (await request(this.#config, "POST", "/v1/send", { body: checkSend(params), headers })).data;
  }
}

export { checkSend as toSendRequest };
