// The native client: `new MailService({ apiKey, baseUrl })`, falling back to MAILSERVICE_API_KEY and
// MAILSERVICE_BASE_URL.

import { ValidationError } from "./errors.js";
import { idempotencyHeaders, request, resolveConfig } from "./http.js";
import { checkSend, checkString } from "./validate.js";

export * from "./errors.js";

/** @param {import("./index.js").ListOptions} [options] */
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
  /** @type {import("./http.js").Config} */
  #config;

  /** @param {import("./http.js").Config} config */
  constructor(config) {
    this.#config = config;
  }

  /**
   * One page: `{ data, has_more, next_cursor }`.
   * @param {import("./index.js").ListOptions} [options]
   * @returns {Promise<import("./index.js").MessageList>}
   */
  async list(options = {}) {
    return (await request(this.#config, "GET", "/v1/messages", { query: listQuery(options) })).data;
  }

  /**
   * Every message, newest first, fetching page after page (`limit` per request) by `next_cursor`:
   * `for await (const message of client.messages.iter())`. The Python client's `messages.iter` is the same.
   * @param {Omit<import("./index.js").ListOptions, "after">} [options]
   */
  async *iter({ limit, direction } = {}) {
    /** @type {string | undefined} */
    let after;
    for (;;) {
      const page = await this.list({ limit, after, direction });
      yield* page.data;
      after = page.next_cursor ?? undefined;
      if (!page.has_more || !after) return;
    }
  }

  /**
   * @param {string} id
   * @returns {Promise<import("./index.js").Message>}
   */
  async get(id) {
    checkString(id, "id", { maxLength: 256, allowBlank: false });
    return (await request(this.#config, "GET", `/v1/messages/${encodeURIComponent(id)}`)).data;
  }
}

export class MailService {
  /** @type {import("./http.js").Config} */
  #config;

  /** @param {import("./index.js").MailServiceOptions} [options] */
  constructor({ apiKey, baseUrl, timeout } = {}) {
    this.#config = resolveConfig({ apiKey, baseUrl, timeout });
    this.messages = new Messages(this.#config);
  }

  /**
   * Send one message; `params` are the wire fields (`from`, `to`, `subject`, `text`, `template`, ...).
   * With `idempotencyKey`, a retry with the same key and params returns the first answer instead of sending again.
   * @param {import("./index.js").SendParams} params
   * @param {{ idempotencyKey?: string }} [options]
   * @returns {Promise<import("./index.js").SendResult>}
   */
  async send(params, { idempotencyKey } = {}) {
    const headers = idempotencyHeaders(idempotencyKey);
    return (await request(this.#config, "POST", "/v1/send", { body: checkSend(params), headers })).data;
  }

  /**
   * Send 1 to 500 messages in one request, all or none; each is what `send` takes. Resolves to each
   * message's `{ id, created_at }` in the order given; a refused item is named (`messages.3.to`).
   * @param {import("./index.js").SendParams[]} messages
   * @param {{ idempotencyKey?: string }} [options]
   * @returns {Promise<import("./index.js").SendResult[]>}
   */
  async sendBatch(messages, { idempotencyKey } = {}) {
    const headers = idempotencyHeaders(idempotencyKey);
    const body = { messages: checkBatch(messages) };
    return (await request(this.#config, "POST", "/v1/send/batch", { body, headers })).data.data;
  }
}

const MAX_BATCH = 500; // the service's default MAILSERVICE_BATCH_MAX; a server set lower answers 400 itself

/**
 * Each send checked as `send` checks it, the error naming the item.
 * @param {unknown} messages
 * @returns {import("./index.js").SendParams[]}
 */
function checkBatch(messages) {
  if (!Array.isArray(messages) || messages.length < 1 || messages.length > MAX_BATCH) {
    throw new ValidationError("messages", `must be an array of 1 to ${MAX_BATCH} sends`);
  }
  return messages.map((params, index) => {
    try {
      return checkSend(params);
    } catch (error) {
      if (!(error instanceof ValidationError)) throw error;
      throw new ValidationError(`messages.${index}${error.field ? `.${error.field}` : ""}`, error.reason);
    }
  });
}

export { checkSend as toSendRequest };
