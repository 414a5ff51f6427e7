// The one HTTP path of every client: configuration, the bearer key, and turning replies into errors.
// No call is ever repeated: a POST that failed may still have been accepted, and resending could
// send the message twice.

import {
  ConfigurationError,
  MailServiceConnectionError,
  MailServiceError,
  ValidationError,
  errorFromResponse,
} from "./errors.js";

export const VERSION = "0.1.0";
const DEFAULT_TIMEOUT_MS = 30000;

/**
 * @typedef {{ apiKey: string, baseUrl: string, timeout: number }} Config
 */

/**
 * Explicit values first, then MAILSERVICE_API_KEY / MAILSERVICE_BASE_URL.
 * @param {import("./index.js").MailServiceOptions} [options]
 * @returns {Config}
 */
export function resolveConfig({ apiKey, baseUrl, timeout } = {}) {
  const key = apiKey || process.env.MAILSERVICE_API_KEY;
  const url = baseUrl || process.env.MAILSERVICE_BASE_URL;
  if (!key) throw new ConfigurationError("No API key: pass one or set MAILSERVICE_API_KEY");
  if (!url) throw new ConfigurationError("No base URL: pass one or set MAILSERVICE_BASE_URL");
  if (!/^https?:\/\//.test(url)) {
    throw new ConfigurationError(`The base URL must start with http:// or https:// (got ${JSON.stringify(url)})`);
  }
  return { apiKey: key, baseUrl: url.replace(/\/+$/, ""), timeout: timeout ?? DEFAULT_TIMEOUT_MS };
}

/**
 * The Idempotency-Key header of a send: retrying with the same key never sends twice (24 hours).
 * @param {unknown} key
 * @param {string} [field]
 * @returns {Record<string, string>}
 */
export function idempotencyHeaders(key, field = "idempotencyKey") {
  if (key === undefined) return {};
  if (typeof key !== "string" || key.length < 1 || key.length > 256 || !/^[ -~]+$/.test(key)) {
    throw new ValidationError(field, "must be 1 to 256 printable ASCII characters");
  }
  return { "Idempotency-Key": key };
}

/**
 * One HTTP call; resolves `{ status, data, headers, requestId }` for 2xx, rejects with a MailServiceError.
 * @param {Config} config
 * @param {string} method
 * @param {string} path
 * @param {{ body?: unknown, query?: Record<string, unknown>, headers?: Record<string, string> }} [options]
 * @returns {Promise<{ status: number, data: any, headers: Record<string, string>, requestId: string | null }>}
 */
export async function request(config, method, path, { body, query, headers: extraHeaders } = {}) {
  const url = new URL(config.baseUrl + path);
  for (const [name, value] of Object.entries(query ?? {})) {
    // An array is a repeated parameter (`type=a&type=b`).
    for (const item of Array.isArray(value) ? value : [value]) {
      if (item !== undefined) url.searchParams.append(name, String(item));
    }
  }
  /** @type {Record<string, string>} */
  const headers = {
    Authorization: `Bearer ${config.apiKey}`,
    Accept: "application/json",
    "User-Agent": `mailservice-client-js/${VERSION}`,
    ...extraHeaders,
  };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  let text;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(config.timeout),
    });
    text = await response.text();
  } catch (caught) {
    const error = /** @type {Error & { cause?: Error }} */ (caught);
    const hint = method === "POST" ? " (the message may or may not have been accepted; it was not resent)" : "";
    throw new MailServiceConnectionError(`${error.name}: ${error.cause?.message ?? error.message}${hint}`, {
      cause: error,
    });
  }
  const replyHeaders = Object.fromEntries(response.headers.entries());
  if (response.status < 200 || response.status >= 300) {
    throw errorFromResponse(response.status, replyHeaders, text);
  }
  const requestId = replyHeaders["x-request-id"] ?? null;
  if (response.status === 204) return { status: response.status, data: null, headers: replyHeaders, requestId };
  try {
    return { status: response.status, data: JSON.parse(text), headers: replyHeaders, requestId };
  } catch {
    throw new MailServiceError("The service answered with a body that is not JSON", {
      code: "InvalidResponse",
      status: response.status,
      requestId,
      headers: replyHeaders,
    });
  }
}
