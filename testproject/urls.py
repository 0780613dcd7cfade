from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]

try:  # the Prometheus extra (docs/metrics.md): the database's gauges at /metrics
    from kathikon.metrics import metrics_view
except ImportError:  # kathikon[prometheus] not installed
    pass
else:
    urlpatterns.append(path("metrics", metrics_view))
