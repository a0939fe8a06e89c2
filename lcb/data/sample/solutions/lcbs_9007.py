from bisect import bisect_right


class Solution:
    def maxPay(self, bookings: list[list[int]]) -> int:
        ordered = sorted(bookings, key=lambda booking: booking[1])
        ends = [booking[1] for booking in ordered]
        best = [0] * (len(ordered) + 1)  # best[i]: using only the first i bookings by end
        for i, (start, _, pay) in enumerate(ordered):
            fits = bisect_right(ends, start, 0, i)
            best[i + 1] = max(best[i], best[fits] + pay)
        return best[-1]
