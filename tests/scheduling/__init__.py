"""Tests of schedule(), cron schedules and batches."""
