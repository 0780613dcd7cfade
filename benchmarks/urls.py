"""URLs for benchmark runs (the admin, for the admin page timings)."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
