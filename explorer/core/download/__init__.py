"""Getting a model from the Hugging Face Hub when the user asks (never otherwise): what to fetch, the
transfer with progress and cancel, and one line for every failure."""

from explorer.core.download.catalog import SUGGESTED, Suggestion
from explorer.core.download.errors import DownloadCancelled, DownloadError
from explorer.core.download.hub import DownloadPlan, Progress, download, plan_download

__all__ = ["SUGGESTED", "DownloadCancelled", "DownloadError", "DownloadPlan", "Progress", "Suggestion",
           "download", "plan_download"]
