export interface MailServiceErrorOptions {
  code: string;
  status?: number | null;
  requestId?: string | null;
  headers?: Record<string, string>;
}

/** Every failure: the service's `code`, the HTTP `status` (null when no response came back), `requestId`. */
export class MailServiceError extends Error {
  constructor(message: string, options: MailServiceErrorOptions);
  readonly code: string;
  readonly status: number | null;
  readonly requestId: string | null;
  readonly headers: Record<string, string>;
}
/** Thrown locally, before any request; `field` names the offending field. */
export class ValidationError extends MailServiceError {
  constructor(field: string, reason: string);
  readonly field: string;
  readonly reason: string;
}
export class ConfigurationError extends MailServiceError {
  constructor(message: string);
}
export class MailServiceConnectionError extends MailServiceError {
  constructor(message: string, options?: { cause?: unknown });
}
export class BadRequestError extends MailServiceError {}
export class AuthenticationError extends MailServiceError {}
export class PermissionDeniedError extends MailServiceError {}
export class NotFoundError extends MailServiceError {}
export class MethodNotAllowedError extends MailServiceError {}
/** 409: `IdempotencyKeyReused` or `IdempotencyKeyInFlight`. */
export class ConflictError extends MailServiceError {}
export class RequestTooLargeError extends MailServiceError {}
export class InternalServerError extends MailServiceError {}
/** `SendingPaused` only: an operator or a safeguard paused sending. */
export class SendingPausedError extends MailServiceError {}
/** Every other 502, 503 or 504 (the database unreachable, a proxy without a backend). */
export class ServiceUnavailableError extends MailServiceError {}
export class RateLimitError extends MailServiceError {
  readonly retryAfter: number | null;
}
/** The class of an error response: by its `code` first, by its HTTP status second. */
export function errorClass(code: string, status: number): typeof MailServiceError;
export function errorFromResponse(status: number, headers: Record<string, string>, text: string): MailServiceError;
