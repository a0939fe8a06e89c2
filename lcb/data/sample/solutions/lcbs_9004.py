class Solution:
    def warmerWithin(self, temps: list[int], k: int) -> list[int]:
        answer = [0] * len(temps)
        waiting: list[int] = []  # days without a warmer day yet; temperatures non-increasing
        for day, temp in enumerate(temps):
            while waiting and temps[waiting[-1]] < temp:
                earlier = waiting.pop()
                if day - earlier <= k:
                    answer[earlier] = day - earlier
            waiting.append(day)
        return answer
