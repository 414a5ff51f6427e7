"""Drop-in modules that mimic four email SDKs; each call becomes one native POST /v1/send.

from mailservice_client.compat import boto3      # was: import boto3
from mailservice_client.compat import postmark   # was: import postmark
from mailservice_client.compat import resend     # was: import resend
from mailservice_client.compat import sendgrid   # was: import sendgrid
"""
