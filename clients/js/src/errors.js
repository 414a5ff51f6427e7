// One error family for every failure, local or remote. Each error carries the service's `code`,
// the HTTP `status` (null when no response came back), the message and the `requestId`.

export class MailServiceError extends Error {
  constructor(message, { code, status = null, requestId = null, headers = {} } = {}) {
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
  constructor(field, reason) {
    super(field ? `${field}: ${reason}` : reason, { code: "ValidationError" });
    this.field = field;
    this.reason = reason;
  }
}

/** No API key or base URL was given and the environment does not provide one. */
export class ConfigurationError extends MailServiceError {
  constructor(message) {
    super(message, { code: "ConfigurationError" });
  }
}

/** No response came back (refused, reset, timed out). A send may or may not have been accepted. */
export class MailServiceConnectionError extends MailServiceError {
  constructor(message, { cause } = {}) {
    super(message, { code: "ConnectionError" });
    this.cause = cause;
  }
}

export class BadRequestError extends MailServiceError {}
export class AuthenticationError extends MailServiceError {}
export class PermissionDeniedError extends MailServiceError {}
export class NotFoundError extends MailServiceError {}
export class RequestTooLargeError extends MailServiceError {}
export class SendingPausedError extends MailServiceError {}

export class RateLimitError extends MailServiceError {
  /** Seconds the service asks to wait, or null when it did not say. */
  get retryAfter() {
    const value = this.headers["retry-after"] ?? "";
    return /^\d+$/.test(value) ? Number(value) : null;
  }
}

const BY_STATUS = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  413: RequestTooLargeError,
  429: RateLimitError,
  503: SendingPausedError,
};

/** The error for a non-2xx response: the ApiError envelope when there is one, else the HTTP status. */
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
  const ErrorClass = BY_STATUS[status] ?? MailServiceError;
  return new ErrorClass(message, { code, status, requestId, headers });
}
