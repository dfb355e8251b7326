"""Running a case's grid: the plan (engine configs × loads × repeats), the live runner, parallel workers, GPU time."""
