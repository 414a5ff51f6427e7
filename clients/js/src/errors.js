// One error family for every failure, local or remote. Each error carries the service's `code`,
// the HTTP `status` (null when no response came back), the message and the `requestId`.

export class MailServiceError extends Error {
  /**
   * @param {string} message
   * @param {import("./errors.js").MailServiceErrorOptions} options
   */
  constructor(message, { code, status = null, requestId = null, headers = {} }) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.requestId = requestId;
    this.headers = headers;
  }
}

/** Raised locally, before any request, for input the service would reject; `field` names it. */
export class ValidationError extends MailServiceError {
  /**
   * @param {string} field
   * @param {string} reason
   */
  constructor(field, reason) {
    super(field ? `${field}: ${reason}` : reason, { code: "ValidationError" });
    this.field = field;
    this.reason = reason;
  }
}

/** No API key or base URL was given and the environment does not provide one. */
export class ConfigurationError extends MailServiceError {
  /** @param {string} message */
  constructor(message) {
    super(message, { code: "ConfigurationError" });
  }
}

/** No response came back (refused, reset, timed out). A send may or may not have been accepted. */
export class MailServiceConnectionError extends MailServiceError {
  /**
   * @param {string} message
   * @param {{ cause?: unknown }} [options]
   */
  constructor(message, { cause } = {}) {
    super(message, { code: "ConnectionError" });
    this.cause = cause;
  }
}

/** HTTP 400: invalid request content, invalid cursor, or sender domain not verified. */
export class BadRequestError extends MailServiceError {}
/** HTTP 401: the key is missing, invalid or revoked. */
export class AuthenticationError extends MailServiceError {}
/** HTTP 403: the key lacks the permission, or the sender is on another domain. */
export class PermissionDeniedError extends MailServiceError {}
export class NotFoundError extends MailServiceError {}
export class MethodNotAllowedError extends MailServiceError {}
/** HTTP 409: the Idempotency-Key was used with another body, or its first request is still being processed. */
export class ConflictError extends MailServiceError {}
export class RequestTooLargeError extends MailServiceError {}
/** HTTP 500: the service failed unexpectedly; quote `requestId` when asking for help. */
export class InternalServerError extends MailServiceError {}
/** `SendingPaused` (HTTP 503): an operator or a safeguard paused sending; no message was sent. */
export class SendingPausedError extends MailServiceError {}
/** Any other HTTP 502, 503 or 504 (the database unreachable, a proxy without a backend): retry later. */
export class ServiceUnavailableError extends MailServiceError {}

export class RateLimitError extends MailServiceError {
  /** Seconds the service asks to wait, or null when it did not say. */
  get retryAfter() {
    const value = this.headers["retry-after"] ?? "";
    return /^\d+$/.test(value) ? Number(value) : null;
  }
}

/**
 * The class of each code the service answers with (docs/api.md, "Error codes"): the code decides,
 * so a database outage and a paused domain (both 503) stay apart.
 * @type {Record<string, typeof MailServiceError>}
 */
const BY_CODE = {
  ValidationError: BadRequestError,
  InvalidJson: BadRequestError,
  InvalidContentType: BadRequestError,
  DomainNotVerified: BadRequestError,
  TemplateNotFound: BadRequestError,
  MissingTemplateVariable: BadRequestError,
  InvalidCursor: BadRequestError,
  BadRequest: BadRequestError,
  Unauthorized: AuthenticationError,
  MissingPermission: PermissionDeniedError,
  SenderNotAllowed: PermissionDeniedError,
  Forbidden: PermissionDeniedError,
  NotFound: NotFoundError,
  MethodNotAllowed: MethodNotAllowedError,
  IdempotencyKeyReused: ConflictError,
  IdempotencyKeyInFlight: ConflictError,
  RequestTooLarge: RequestTooLargeError,
  RateLimited: RateLimitError,
  AllowanceExhausted: RateLimitError,
  InternalError: InternalServerError,
  SendingPaused: SendingPausedError,
  ServiceUnavailable: ServiceUnavailableError,
};

/**
 * A code this client does not know (a newer service), or no envelope at all (a proxy's page):
 * the status decides.
 * @type {Record<number, typeof MailServiceError>}
 */
const BY_STATUS = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  405: MethodNotAllowedError,
  409: ConflictError,
  413: RequestTooLargeError,
  429: RateLimitError,
  500: InternalServerError,
  502: ServiceUnavailableError,
  503: ServiceUnavailableError,
  504: ServiceUnavailableError,
};

/**
 * The class of an error response: by its `code` first, by its HTTP status second.
 * @param {string} code
 * @param {number} status
 * @returns {typeof MailServiceError}
 */
export function errorClass(code, status) {
  return (Object.hasOwn(BY_CODE, code) ? BY_CODE[code] : BY_STATUS[status]) ?? MailServiceError;
}

/**
 * The error for a non-2xx response: the ApiError envelope when there is one, else the HTTP status.
 * @param {number} status
 * @param {Record<string, string>} headers lower-case names
 * @param {string} text
 */
export function errorFromResponse(status, headers, text) {
  let code = `Http${status}`;
  let message = `HTTP ${status}`;
  let requestId = headers["x-request-id"] ?? null;
  let envelope = null;
  try {
    envelope = JSON.parse(text);
  } catch {
    envelope = null;
  }
  const error = envelope && typeof envelope === "object" ? envelope.error : null;
  if (error && typeof error === "object") {
    code = String(error.code || code);
    message = String(error.message || message);
    requestId = error.request_id ? String(error.request_id) : requestId;
  }
  const ErrorClass = errorClass(code, status);
  return new ErrorClass(message, { code, status, requestId, headers });
}
