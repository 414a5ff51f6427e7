import type { AddressOrList, SendParams, TemplateReference } from "./index.js";

interface Common {
  from: string;
  to: AddressOrList;
  cc?: AddressOrList;
  bcc?: AddressOrList;
  replyTo?: AddressOrList;
}
export interface CreateEmailOptions extends Common {
  subject: string;
  text?: string;
  html?: string;
}
export interface CreateTemplateEmailOptions extends Common {
  template: TemplateReference;
  subject?: string;
}
export interface ErrorResponse {
  /** The service's error code, or "ConnectionError" when no response came back. */
  name: string;
  message: string;
  statusCode: number | null;
  requestId: string | null;
}
export type CreateEmailResponse =
  | { data: { id: string }; error: null; headers: Record<string, string> }
  | { data: null; error: ErrorResponse; headers: Record<string, string> | null };

/** Resend's request options; `idempotencyKey` becomes the `Idempotency-Key` header. */
export interface CreateEmailRequestOptions {
  idempotencyKey?: string;
}

declare class Emails {
  send(
    payload: CreateEmailOptions | CreateTemplateEmailOptions,
    options?: CreateEmailRequestOptions,
  ): Promise<CreateEmailResponse>;
  create(
    payload: CreateEmailOptions | CreateTemplateEmailOptions,
    options?: CreateEmailRequestOptions,
  ): Promise<CreateEmailResponse>;
}

export class Resend {
  /** `key` defaults to MAILSERVICE_API_KEY, `baseUrl` to MAILSERVICE_BASE_URL. */
  constructor(key?: string, options?: { baseUrl?: string });
  readonly emails: Emails;
}

export function toSendRequest(payload: CreateEmailOptions | CreateTemplateEmailOptions): SendParams;
